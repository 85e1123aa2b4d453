package bedrockfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"

	"github.com/autodiag/autodiag/internal/fake/fakefault"
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
	Huge                      // a 200 whose text streams SetHugeBytes bytes (hostile)
)

// ToolUse is one toolUse block of a scripted reply; Input is a JSON object.
type ToolUse struct {
	ID, Name, Input string
}

// Reply is one scripted answer: text, tool uses, or both.
type Reply struct {
	Text     string
	ToolUses []ToolUse
}

// Request is one recorded request.
type Request struct {
	ModelID string
	Body    []byte
}

// Server is the fake; Close stops it.
type Server struct {
	*httptest.Server
	fakefault.Plan[Fault, Request]
	fakefault.Replies[Reply]
	models []string // set by New only
}

// DefaultReply is the canned report.
const DefaultReply = "## Root cause\nThe process was killed by the kernel's OOM killer.\n\n## Analysis\n`Out of memory: Killed process 4242 (java)`\n\n## Impact\nThe service restarted.\n\n## Next steps\n- `dmesg -T | grep -i oom`\n- `systemctl status app`\n\n## Confidence\nconfirmed\n"

// New starts a fake on a loopback port. models, when given, are the only
// model ids it knows; others get a ValidationException.
func New(models ...string) *Server {
	s := &Server{models: models}
	s.SetReply(DefaultReply)
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// Close ends pending slow answers, then stops the server.
func (s *Server) Close() {
	s.Plan.Close()
	s.Server.Close()
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
	f := s.Next(Request{ModelID: model, Body: body})
	reply, models := s.Reply(), s.models
	latency := s.Latency()
	if !s.Wait(r.Context(), latency) {
		return
	}
	var req converseRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeErr(w, http.StatusBadRequest, "ValidationException", "body is not JSON")
		return
	}
	if msg := req.check(); msg != "" {
		writeErr(w, http.StatusBadRequest, "ValidationException", msg)
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
	case Huge:
		writeHuge(w, s.HugeBytes())
		return
	}
	var uses []ToolUse
	if f == OK {
		if q, ok := s.Take(); ok {
			reply, uses = q.Text, q.ToolUses
		}
	}
	in, out := len(body)/4, len(reply)/4
	content := []any{}
	if reply != "" {
		content = append(content, map[string]any{"text": reply})
	}
	for _, u := range uses {
		stop = "tool_use"
		content = append(content, map[string]any{"toolUse": map[string]any{
			"toolUseId": u.ID, "name": u.Name, "input": json.RawMessage(u.Input)}})
		out += len(u.Input) / 4
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

// writeHuge streams an answer whose text is n bytes, without holding it.
func writeHuge(w http.ResponseWriter, n int64) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"output":{"message":{"role":"assistant","content":[{"text":"`)
	if fakefault.Fill(w, n) != nil {
		return // the client stopped reading
	}
	_, _ = io.WriteString(w, `"}]}},"stopReason":"end_turn","usage":{"inputTokens":1,"outputTokens":1,"totalTokens":2},"metrics":{"latencyMs":0}}`)
}

// converseRequest is what the fake checks of a request, as Bedrock does:
// messages alternate from the user's, every toolResult answers a toolUse
// of the assistant turn just before, and tools have a name and a JSON
// schema.
type converseRequest struct {
	InferenceConfig struct {
		MaxTokens int `json:"maxTokens"`
	} `json:"inferenceConfig"`
	Messages []struct {
		Role    string `json:"role"`
		Content []struct {
			Text    *string `json:"text"`
			ToolUse *struct {
				ToolUseID string          `json:"toolUseId"`
				Name      string          `json:"name"`
				Input     json.RawMessage `json:"input"`
			} `json:"toolUse"`
			ToolResult *struct {
				ToolUseID string `json:"toolUseId"`
				Content   []struct {
					Text *string `json:"text"`
				} `json:"content"`
				Status string `json:"status"`
			} `json:"toolResult"`
		} `json:"content"`
	} `json:"messages"`
	ToolConfig *struct {
		Tools []struct {
			ToolSpec struct {
				Name        string `json:"name"`
				InputSchema struct {
					JSON json.RawMessage `json:"json"`
				} `json:"inputSchema"`
			} `json:"toolSpec"`
		} `json:"tools"`
	} `json:"toolConfig"`
}

// check returns Bedrock's complaint about r, "" when it has none.
func (r converseRequest) check() string {
	if len(r.Messages) == 0 || r.Messages[0].Role != "user" {
		return "A conversation must start with a user message."
	}
	if r.ToolConfig != nil {
		for i, t := range r.ToolConfig.Tools {
			if t.ToolSpec.Name == "" || !json.Valid(t.ToolSpec.InputSchema.JSON) || len(t.ToolSpec.InputSchema.JSON) == 0 {
				return fmt.Sprintf("toolConfig.tools[%d]: toolSpec needs a name and inputSchema.json", i)
			}
		}
	}
	var asked map[string]bool // toolUse ids of the last assistant turn
	for i, m := range r.Messages {
		if i > 0 && m.Role == r.Messages[i-1].Role {
			return "A conversation must alternate between user and assistant roles."
		}
		if len(m.Content) == 0 {
			return fmt.Sprintf("messages[%d]: content must not be empty", i)
		}
		answered := map[string]bool{}
		for _, c := range m.Content {
			switch {
			case c.ToolUse != nil:
				if m.Role != "assistant" || c.ToolUse.ToolUseID == "" || !json.Valid(c.ToolUse.Input) {
					return fmt.Sprintf("messages[%d]: toolUse must be the assistant's, with an id and a JSON input", i)
				}
				if r.ToolConfig == nil {
					return "The toolConfig field must be defined when using toolUse and toolResult content blocks."
				}
			case c.ToolResult != nil:
				if m.Role != "user" || !asked[c.ToolResult.ToolUseID] {
					return fmt.Sprintf("messages[%d]: toolResult %q answers no toolUse of the previous turn", i, c.ToolResult.ToolUseID)
				}
				answered[c.ToolResult.ToolUseID] = true
			case c.Text == nil:
				return fmt.Sprintf("messages[%d]: a content block must have one member", i)
			}
		}
		if m.Role == "user" && len(asked) != len(answered) {
			return fmt.Sprintf("messages[%d]: the number of toolResult blocks exceeds or is less than the toolUse blocks of the previous turn", i)
		}
		asked = nil
		if m.Role == "assistant" {
			asked = map[string]bool{}
			for _, c := range m.Content {
				if c.ToolUse != nil {
					asked[c.ToolUse.ToolUseID] = true
				}
			}
		}
	}
	return ""
}
