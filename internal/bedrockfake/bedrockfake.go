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

	"github.com/autodiag/autodiag/internal/fakefault"
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
	fakefault.Plan[Fault, Request]
	mu     sync.Mutex // guards reply and models
	reply  string
	models []string
}

// DefaultReply is the canned report.
const DefaultReply = "## Root cause\nThe process was killed by the kernel's OOM killer.\n\n## Analysis\n`Out of memory: Killed process 4242 (java)`\n\n## Impact\nThe service restarted.\n\n## Next steps\n- `dmesg -T | grep -i oom`\n- `systemctl status app`\n\n## Confidence\nconfirmed\n"

// New starts a fake on a loopback port. models, when given, are the only
// model ids it knows; others get a ValidationException.
func New(models ...string) *Server {
	s := &Server{reply: DefaultReply, models: models}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close ends pending slow answers, then stops the server.
func (s *Server) Close() {
	s.Plan.Close()
	s.Server.Close()
}

// SetReply sets the answer text.
func (s *Server) SetReply(text string) { s.mu.Lock(); s.reply = text; s.mu.Unlock() }

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
	f := s.Next(Request{ModelID: model, Body: body})
	s.mu.Lock()
	reply, models := s.reply, s.models
	s.mu.Unlock()
	latency := s.Latency()
	if !s.Wait(r.Context(), latency) {
		return
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
