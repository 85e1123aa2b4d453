package openaifake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/autodiag/autodiag/internal/fake/fakefault"
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
	Huge                      // a 200 whose content streams SetHugeBytes bytes (hostile)
)

// ToolCall is one tool call of a scripted reply; Arguments is the JSON
// object the model sends, in a string as on the wire.
type ToolCall struct {
	ID, Name, Arguments string
}

// Reply is one scripted answer: text, tool calls, or both.
type Reply struct {
	Text      string
	ToolCalls []ToolCall
}

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
	fakefault.Replies[Reply]
}

// DefaultReply is the canned report.
const DefaultReply = "## Root cause\nThe disk is full.\n\n## Analysis\n`/dev/xvda1 100%`\n\n## Impact\nWrites fail.\n\n## Next steps\n- `df -h`\n- `du -xsh /var/* | sort -h`\n\n## Confidence\nlikely\n"

// New starts a fake on a loopback port.
func New() *Server {
	s := &Server{}
	s.SetReply(DefaultReply)
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

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f := s.Next(Request{Path: r.URL.Path, Authorization: r.Header.Get("Authorization"), Body: body})
	reply := s.Reply()
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	if !s.Wait(r.Context(), s.Latency()) {
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, http.StatusBadRequest, "invalid_request_error", "body is not JSON")
		return
	}
	if msg := req.check(); msg != "" {
		writeErr(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}
	finish := "stop"
	var calls []ToolCall
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
	case Huge:
		writeHuge(w, req.Model, s.HugeBytes())
		return
	case OK:
		if q, ok := s.Take(); ok {
			reply, calls = q.Text, q.ToolCalls
		}
	}
	in := len(body) / 4
	out := len(reply) / 4
	msg := map[string]any{"role": "assistant", "content": reply}
	if len(calls) > 0 {
		finish = "tool_calls"
		var tcs []any
		for _, c := range calls {
			tcs = append(tcs, map[string]any{"id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
			out += len(c.Arguments) / 4
		}
		msg["tool_calls"] = tcs
		if reply == "" {
			msg["content"] = nil
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": msg}},
		"usage":   map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	})
}

// writeHuge streams an answer whose content is n bytes, without holding it.
func writeHuge(w http.ResponseWriter, model string, n int64) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"id":"chatcmpl-fake","object":"chat.completion","created":1700000000,"model":%q,"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"`, model)
	if fakefault.Fill(w, n) != nil {
		return // the client stopped reading
	}
	_, _ = io.WriteString(w, `"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
}

// chatRequest is what the fake checks of a request, as the real API does:
// the roles, and that every tool message answers a tool call of the
// assistant turn before it.
type chatRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	Messages  []struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		ToolCallID string  `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
}

// check returns the API's complaint about r, "" when it has none.
func (r chatRequest) check() string {
	if r.Model == "" {
		return "you must provide a model parameter"
	}
	if len(r.Messages) == 0 {
		return "'messages' must contain at least one message"
	}
	for i, t := range r.Tools {
		if t.Type != "function" || t.Function.Name == "" {
			return fmt.Sprintf("tools[%d]: type must be function with a name", i)
		}
		if len(t.Function.Parameters) > 0 && !json.Valid(t.Function.Parameters) {
			return fmt.Sprintf("tools[%d].function.parameters: not JSON", i)
		}
	}
	open := map[string]bool{} // tool call ids not yet answered
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "user":
			if len(open) > 0 {
				return fmt.Sprintf("messages[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'", i)
			}
			if m.Content == nil {
				return fmt.Sprintf("messages[%d].content: must be a string", i)
			}
		case "assistant":
			if len(open) > 0 {
				return fmt.Sprintf("messages[%d]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'", i)
			}
			for _, c := range m.ToolCalls {
				if c.ID == "" || c.Type != "function" || !json.Valid([]byte(c.Function.Arguments)) {
					return fmt.Sprintf("messages[%d].tool_calls: id, type function and JSON arguments required", i)
				}
				open[c.ID] = true
			}
		case "tool":
			if !open[m.ToolCallID] {
				return fmt.Sprintf("messages[%d]: messages with role 'tool' must be a response to a preceding message with 'tool_calls'", i)
			}
			delete(open, m.ToolCallID)
		default:
			return fmt.Sprintf("messages[%d].role: invalid value %q", i, m.Role)
		}
	}
	return ""
}

func writeErr(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": typ}})
}
