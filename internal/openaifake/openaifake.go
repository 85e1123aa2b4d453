package openaifake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Fault is how the fake answers one request.
type Fault int

// Faults.
const (
	OK           Fault = iota // the reply, finish_reason "stop"
	Throttle                  // 429 with Retry-After: 0
	ServerErr                 // 500
	Length                    // the reply cut, finish_reason "length"
	Empty                     // an empty content
	Garbage                   // a 200 whose body is not JSON
	UnknownModel              // 404 model_not_found, as for a model that does not exist
)

// Request is one recorded request.
type Request struct {
	Path          string
	Authorization string
	Body          []byte
}

// Server is the fake; Close stops it.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	reply   string
	latency time.Duration
	script  []Fault
	always  Fault
	reqs    []Request
	done    chan struct{}
	once    sync.Once
}

// DefaultReply is the canned report.
const DefaultReply = "## Root cause\nThe disk is full.\n\n## Analysis\n`/dev/xvda1 100%`\n\n## Impact\nWrites fail.\n\n## Next steps\n- `df -h`\n- `du -xsh /var/* | sort -h`\n\n## Confidence\nlikely\n"

// New starts a fake on a loopback port.
func New() *Server {
	s := &Server{reply: DefaultReply, done: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// BaseURL is the base URL a client is given (…/v1).
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Close ends pending slow answers, then stops the server.
func (s *Server) Close() {
	s.once.Do(func() { close(s.done) })
	s.Server.Close()
}

// SetReply sets the answer text.
func (s *Server) SetReply(text string) { s.mu.Lock(); s.reply = text; s.mu.Unlock() }

// SetLatency delays every answer by d (or until the client gives up).
func (s *Server) SetLatency(d time.Duration) { s.mu.Lock(); s.latency = d; s.mu.Unlock() }

// Script makes the next requests answer with faults, in order; after them
// the fake answers with Always's fault.
func (s *Server) Script(faults ...Fault) {
	s.mu.Lock()
	s.script = append(s.script, faults...)
	s.mu.Unlock()
}

// Always sets the fault of every request after the script.
func (s *Server) Always(f Fault) { s.mu.Lock(); s.always = f; s.mu.Unlock() }

// Requests returns the recorded requests.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Path: r.URL.Path, Authorization: r.Header.Get("Authorization"), Body: body})
	f := s.always
	if len(s.script) > 0 {
		f, s.script = s.script[0], s.script[1:]
	}
	reply, latency := s.reply, s.latency
	s.mu.Unlock()
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		}
	}
	var req struct {
		Model     string `json:"model"`
		MaxTokens int    `json:"max_tokens"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, http.StatusBadRequest, "invalid_request_error", "body is not JSON")
		return
	}
	finish := "stop"
	switch f {
	case Throttle:
		w.Header().Set("Retry-After", "0")
		writeErr(w, http.StatusTooManyRequests, "rate_limit_exceeded", "Rate limit reached")
		return
	case ServerErr:
		writeErr(w, http.StatusInternalServerError, "server_error", "The server had an error")
		return
	case UnknownModel:
		writeErr(w, http.StatusNotFound, "model_not_found", fmt.Sprintf("The model %q does not exist", req.Model))
		return
	case Garbage:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "<html>502 Bad Gateway</html")
		return
	case Length:
		reply, finish = reply[:len(reply)/2], "length"
	case Empty:
		reply = ""
	}
	in := len(body) / 4
	out := len(reply) / 4
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
			"message": map[string]any{"role": "assistant", "content": reply}}},
		"usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	})
}

func writeErr(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": typ}})
}
