package openaifake_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/internal/fake/openaifake"
)

// TestFaultsThroughTheClient drives every fault with the client autodiag
// ships.
func TestFaultsThroughTheClient(t *testing.T) {
	f := openaifake.New()
	defer f.Close()
	c := report.NewOpenAI(f.BaseURL(), "k", &http.Client{})
	ask := func(ctx context.Context) (report.Response, error) {
		return c.Complete(ctx, report.Request{Model: "m", System: "s", User: "hi", MaxTokens: 5})
	}
	cases := []struct {
		fault  openaifake.Fault
		status int    // API error status; 0: no API error
		finish string // when answered
		err    error  // the error wrapped, when not an API error
	}{
		{fault: openaifake.OK, finish: "stop"},
		{fault: openaifake.Throttle, status: 429},
		{fault: openaifake.ServerErr, status: 500},
		{fault: openaifake.UnknownModel, status: 404},
		{fault: openaifake.Length, finish: "length"},
		{fault: openaifake.Empty, err: report.ErrEmpty},
		{fault: openaifake.Garbage, err: errors.New("decode")},
	}
	for _, tc := range cases {
		f.Script(tc.fault)
		out, err := ask(context.Background())
		var pe *report.Error
		switch {
		case tc.status != 0:
			if !errors.As(err, &pe) || pe.StatusCode != tc.status {
				t.Errorf("fault %d: err %v, want status %d", tc.fault, err, tc.status)
			}
		case tc.err != nil:
			if err == nil || !errors.Is(err, tc.err) && !strings.Contains(err.Error(), tc.err.Error()) {
				t.Errorf("fault %d: err %v, want %v", tc.fault, err, tc.err)
			}
		default:
			if err != nil || out.FinishReason != tc.finish || out.Text == "" || out.InputTokens == 0 {
				t.Errorf("fault %d: %+v %v", tc.fault, out, err)
			}
		}
	}
	if n := len(f.Requests()); n != len(cases) {
		t.Fatalf("%d requests recorded, want %d", n, len(cases))
	}
	// Latency: the client's deadline ends the wait.
	f.SetLatency(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := ask(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow answer: %v", err)
	}
}

// documentedToolTurn is the tool round trip of the Chat Completions API
// reference ("Function calling"): an assistant turn with tool_calls and
// null content, then the tool message answering it by tool_call_id.
const documentedToolTurn = `{
  "model": "gpt-4.1",
  "messages": [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather like in Paris today?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_12345xyz", "type": "function",
       "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris, France\"}"}}]},
    {"role": "tool", "tool_call_id": "call_12345xyz", "content": "14 degrees"}
  ],
  "tools": [{"type": "function", "function": {"name": "get_weather",
    "description": "Get current temperature for a given location.",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
      "required": ["location"], "additionalProperties": false}}}]
}`

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestToolShapes checks the fake against the documented request shape:
// it takes the reference's tool round trip, refuses a tool message that
// answers no call, and answers scripted tool calls as the API does.
func TestToolShapes(t *testing.T) {
	f := openaifake.New()
	defer f.Close()
	if code, body := post(t, f.BaseURL(), documentedToolTurn); code != 200 {
		t.Fatalf("documented tool turn: %d %s", code, body)
	}
	orphan := strings.Replace(documentedToolTurn, `"tool_call_id": "call_12345xyz"`, `"tool_call_id": "call_other"`, 1)
	if code, body := post(t, f.BaseURL(), orphan); code != 400 || !strings.Contains(body, "role 'tool'") {
		t.Fatalf("orphan tool message: %d %s", code, body)
	}
	f.Queue(openaifake.Reply{ToolCalls: []openaifake.ToolCall{{ID: "call_1", Name: "df", Arguments: `{"host":"web-3"}`}}})
	c := report.NewOpenAI(f.BaseURL(), "k", &http.Client{})
	tools := []report.Tool{{Name: "df", Description: "disk", Schema: []byte(`{"type":"object"}`)}}
	r, err := c.Complete(context.Background(), report.Request{Model: "m", System: "s", User: "u", MaxTokens: 5, Tools: tools})
	if err != nil || r.FinishReason != "tool_calls" || len(r.ToolCalls) != 1 || r.ToolCalls[0].ID != "call_1" || string(r.ToolCalls[0].Input) != `{"host":"web-3"}` {
		t.Fatalf("tool call answer %+v %v", r, err)
	}
	// The client's next turn is accepted: it answers the call by id.
	msgs := []report.Message{{Role: report.RoleUser, Text: "u"}, {Role: report.RoleAssistant, ToolCalls: r.ToolCalls},
		{Role: report.RoleUser, ToolResults: []report.ToolResult{{CallID: "call_1", Text: "100%"}}}}
	if r, err := c.Complete(context.Background(), report.Request{Model: "m", System: "s", Messages: msgs, MaxTokens: 5, Tools: tools}); err != nil || r.Text == "" {
		t.Fatalf("the turn after the tool: %+v %v", r, err)
	}
}
