package openaifake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/autodiag/autodiag/internal/fakefault"
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
	fakefault.Plan[Fault, Request]
	mu    sync.Mutex // guards reply
	reply string
}

// DefaultReply is the canned report.
const DefaultReply = "## Root cause\nThe disk is full.\n\n## Analysis\n`/dev/xvda1 100%`\n\n## Impact\nWrites fail.\n\n## Next steps\n- `df -h`\n- `du -xsh /var/* | sort -h`\n\n## Confidence\nlikely\n"

// New starts a fake on a loopback port.
func New() *Server {
	s := &Server{reply: DefaultReply}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// BaseURL is the base URL a client is given (…/v1).
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// Close ends pending slow answers, then stops the server.
func (s *Server) Close() {
	s.Plan.Close()
	s.Server.Close()
}

// SetReply sets the answer text.
func (s *Server) SetReply(text string) { s.mu.Lock(); s.reply = text; s.mu.Unlock() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f := s.Next(Request{Path: r.URL.Path, Authorization: r.Header.Get("Authorization"), Body: body})
	s.mu.Lock()
	reply := s.reply
	s.mu.Unlock()
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	if !s.Wait(r.Context(), s.Latency()) {
		return
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
