package bedrockfake

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault is how the fake answers one request.
type Fault int

// Faults.
const (
	OK           Fault = iota // the reply, stopReason end_turn
	Throttle                  // 429 ThrottlingException
	ServerErr                 // 500 InternalServerException
	MaxTokens                 // the reply cut, stopReason max_tokens
	Empty                     // a message without text
	Garbage                   // a 200 whose body is not JSON
	UnknownModel              // 400 ValidationException, as for a model id that does not exist
)

// Request is one recorded request.
type Request struct {
	ModelID string
	Body    []byte
}

// Server is the fake; Close stops it.
type Server struct {
	*httptest.Server
	mu      sync.Mutex
	reply   string
	latency time.Duration
	script  []Fault
	always  Fault
	models  []string
	reqs    []Request
	done    chan struct{}
	once    sync.Once
}

// DefaultReply is the canned report.
const DefaultReply = "## Root cause\nThe process was killed by the kernel's OOM killer.\n\n## Analysis\n`Out of memory: Killed process 4242 (java)`\n\n## Impact\nThe service restarted.\n\n## Next steps\n- `dmesg -T | grep -i oom`\n- `systemctl status app`\n\n## Confidence\nconfirmed\n"

// New starts a fake on a loopback port. models, when given, are the only
// model ids it knows; others get a ValidationException.
func New(models ...string) *Server {
	s := &Server{reply: DefaultReply, models: models, done: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close ends pending slow answers, then stops the server.
func (s *Server) Close() {
	s.once.Do(func() { close(s.done) })
	s.Server.Close()
}

// SetReply sets the answer text.
func (s *Server) SetReply(text string) { s.mu.Lock(); s.reply = text; s.mu.Unlock() }

// SetLatency delays every answer by d (or until the client gives up).
func (s *Server) SetLatency(d time.Duration) { s.mu.Lock(); s.latency = d; s.mu.Unlock() }

// Script makes the next requests answer with faults, in order.
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
	p := r.URL.EscapedPath()
	if r.Method != http.MethodPost || !strings.HasPrefix(p, "/model/") || !strings.HasSuffix(p, "/converse") {
		writeErr(w, http.StatusNotFound, "UnknownOperationException", "unknown operation "+r.Method+" "+p)
		return
	}
	model, err := url.PathUnescape(strings.TrimSuffix(strings.TrimPrefix(p, "/model/"), "/converse"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "ValidationException", "bad model id")
		return
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{ModelID: model, Body: body})
	f := s.always
	if len(s.script) > 0 {
		f, s.script = s.script[0], s.script[1:]
	}
	reply, latency, models := s.reply, s.latency, s.models
	s.mu.Unlock()
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
		InferenceConfig struct {
			MaxTokens int `json:"maxTokens"`
		} `json:"inferenceConfig"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, http.StatusBadRequest, "ValidationException", "body is not JSON")
		return
	}
	if f == UnknownModel || len(models) > 0 && !slices.Contains(models, model) {
		writeErr(w, http.StatusBadRequest, "ValidationException", "The provided model identifier is invalid.")
		return
	}
	stop := "end_turn"
	switch f {
	case Throttle:
		writeErr(w, http.StatusTooManyRequests, "ThrottlingException", "Too many requests, please wait before trying again.")
		return
	case ServerErr:
		writeErr(w, http.StatusInternalServerError, "InternalServerException", "The server encountered an error.")
		return
	case Garbage:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "<html>502 Bad Gateway</html")
		return
	case MaxTokens:
		reply, stop = reply[:len(reply)/2], "max_tokens"
	case Empty:
		reply = ""
	}
	in, out := len(body)/4, len(reply)/4
	content := []any{}
	if reply != "" {
		content = append(content, map[string]any{"text": reply})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"output":     map[string]any{"message": map[string]any{"role": "assistant", "content": content}},
		"stopReason": stop,
		"usage":      map[string]any{"inputTokens": in, "outputTokens": out, "totalTokens": in + out},
		"metrics":    map[string]any{"latencyMs": latency.Milliseconds()},
	})
}

func writeErr(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", typ)
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"message": msg})
}
