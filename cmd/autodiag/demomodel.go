package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"

	rootcause "github.com/autodiag/autodiag/agent/report"
)

// The scripted model of `autodiag demo`: a stand-in for an LLM that
// speaks the subset of the OpenAI Chat Completions API the agent's openai
// provider uses, and answers from a script instead of thinking. It lives
// in this package, behind the demo command only: no configuration can
// point the agent at it, and `autodiag run` never builds it. Its answers
// are the constants below, so that a change of the report's format is
// one edit here.

// demoModelName is the model the demo's report section names; the
// report's header shows it, so nobody mistakes the demo's report for a
// real model's.
const demoModelName = "autodiag-demo-scripted-model"

// The script. First turn: the tool calls (the investigation runs them as
// tasks on the alert's host: two offered diagnostics, and one the catalog
// does not offer, which the agent refuses and lists under Gaps). Second
// turn: the structured answer the investigation's schema asks for. Its
// evidence cites the task ids the agent gave the model, each with a line
// copied from that task's output (the failed check's own line, then the
// Mem: line of free and the root filesystem's line of df, whatever this
// machine printed), so the agent's grounding
// check verifies every citation against the records.
var (
	demoToolCalls = []demoToolCall{
		{ID: "call_memory", Name: "memory", Arguments: `{}`},
		{ID: "call_disk", Name: "disk-usage", Arguments: `{"mount":"/"}`},
		{ID: "call_cleanup", Name: "delete-old-logs", Arguments: `{}`},
	}
	demoAnswer = demoStructuredAnswer{Answer: rootcause.Answer{
		RootCause:  "The volume the alert names, /srv/demo-data, is not mounted on the host: df cannot find it.",
		Category:   "config_error",
		Confidence: "likely",
		Evidence: []rootcause.Citation{
			{TaskID: "{parent}", Quote: "/srv/demo-data: No such file or directory", Claim: "The data volume is missing"},
			{TaskID: "{memory}", Quote: "{memory_quote}", Claim: "Memory is not the cause"},
			{TaskID: "{disk}", Quote: "{disk_quote}", Claim: "The root filesystem answers"},
		},
		Gaps:   []string{"delete-old-logs was refused: it is not a diagnostic offered to investigations"},
		Impact: "Anything writing under /srv/demo-data writes to the root filesystem instead, or fails.",
		NextSteps: []string{"findmnt /srv/demo-data", `journalctl -u srv-demo\x2ddata.mount -n 50`,
			"Check the volume's attachment in the EC2 console."},
	}}
)

// demoStructuredAnswer is the investigation's answer schema as the model
// writes it, with {name} placeholders for what only the run knows.
type demoStructuredAnswer struct{ rootcause.Answer }

// answer is the script's answer with the ids and quotes of this run.
func (a demoStructuredAnswer) answer(vars map[string]string) string {
	ev := make([]rootcause.Citation, len(a.Evidence))
	for i, c := range a.Evidence {
		c.TaskID = demoFill(c.TaskID, vars)
		c.Quote = demoFill(c.Quote, vars)
		ev[i] = c
	}
	a.Evidence = ev
	b, _ := json.Marshal(a.Answer)
	return string(b)
}

// demoFill is s with each {name} of vars replaced by its value.
func demoFill(s string, vars map[string]string) string {
	for k, v := range vars {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}

// demoLine is the output line of a tool result (the lines after its
// "task ID: outcome ..." header) that want picks, spaces folded; the first
// line of at least 6 characters when none does.
func demoLine(result string, want func(string) bool) string {
	first := ""
	for _, l := range strings.Split(result, "\n")[1:] {
		l = strings.Join(strings.Fields(l), " ")
		if len(l) < 6 || strings.HasPrefix(l, "```") || strings.HasPrefix(l, "~~~") {
			continue
		}
		if want(l) {
			return l
		}
		if first == "" {
			first = l
		}
	}
	return first
}

// demoToolCall is one tool call of the script, as on the wire.
type demoToolCall struct {
	ID, Name, Arguments string
}

// scriptedModel serves the script: the first request of a conversation
// (no tool results in it yet) gets the tool calls, any later one the
// answer. It records how many requests it answered.
type scriptedModel struct {
	mu       sync.Mutex
	requests int
}

// demoTaskID finds the task ids the agent put in the conversation: the
// parent's ("The output above is task ID.") and each tool result's
// ("task ID: outcome ...").
var (
	demoParentID = regexp.MustCompile(`The output above is task ([A-Za-z0-9._:@-]+)\.`)
	demoResultID = regexp.MustCompile(`^task ([A-Za-z0-9._:@-]+): outcome`)
)

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.requests++
	m.mu.Unlock()
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role       string  `json:"role"`
			Content    *string `json:"content"`
			ToolCallID string  `json:"tool_call_id"`
		} `json:"messages"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil || json.Unmarshal(body, &req) != nil {
		http.Error(w, `{"error":{"message":"body is not JSON"}}`, http.StatusBadRequest)
		return
	}
	ids := map[string]string{}
	toolTurn := false
	for _, msg := range req.Messages {
		toolTurn = toolTurn || msg.Role == "tool"
		if msg.Content == nil {
			continue
		}
		if p := demoParentID.FindStringSubmatch(*msg.Content); p != nil {
			ids["parent"] = p[1]
		}
		if msg.Role != "tool" {
			continue
		}
		if t := demoResultID.FindStringSubmatch(*msg.Content); t != nil {
			switch msg.ToolCallID {
			case "call_memory":
				ids["memory"] = t[1]
				ids["memory_quote"] = demoLine(*msg.Content, func(l string) bool { return strings.HasPrefix(l, "Mem:") })
			case "call_disk":
				ids["disk"] = t[1]
				ids["disk_quote"] = demoLine(*msg.Content, func(l string) bool { return strings.HasSuffix(l, " /") })
			}
		}
	}
	message := map[string]any{"role": "assistant"}
	finish := "stop"
	if !toolTurn {
		finish = "tool_calls"
		var calls []any
		for _, c := range demoToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		message["content"], message["tool_calls"] = nil, calls
	} else {
		message["content"] = demoAnswer.answer(ids)
	}
	in, out := len(body)/4, 200
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-demo-%d", m.count()), "object": "chat.completion", "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": message}},
		"usage":   map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out},
	})
}

func (m *scriptedModel) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests
}
