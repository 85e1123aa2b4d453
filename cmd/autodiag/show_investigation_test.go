package main

import (
	"encoding/json"
	"strings"
	"testing"

	rootcause "github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/taskview"
)

// `autodiag show` prints an investigation's tree under its report, and a
// tool call's place in it.
func TestShowInvestigationTree(t *testing.T) {
	inv := &rootcause.Investigation{ID: "inv-1", Parent: "t1", EndedBy: "max_steps", InputTokens: 300, OutputTokens: 30, CostUSD: 0.0012,
		Steps: []rootcause.Step{
			{N: 1, InputTokens: 100, OutputTokens: 10, Calls: []rootcause.Call{
				{Tool: "journal", Host: "web-3", Result: "ran", TaskID: "inv-1-s1-c1", Outcome: "succeeded",
					RanOn: &taskview.RanOn{InstanceID: "i-0abc", Hostname: "ip-10-0-1-5"}},
				{Tool: "rm_rf", Host: "web-3", Result: "not_offered", Reason: `"rm_rf" is not a diagnostic offered to investigations`}}},
			{N: 2, InputTokens: 200, OutputTokens: 20}},
		Evidence: []string{"inv-1-s1-c1"}}
	rep, _ := json.Marshal(rootcause.Result{Status: "ok", Markdown: "## Root cause\nx\n", Investigation: inv})
	var b strings.Builder
	printTask(&b, taskview.Task{ID: "t1", Outcome: "failed", Report: rep})
	out := b.String()
	for _, want := range []string{
		"investigation inv-1 of task t1: ended by max_steps, 2 steps, 300+30 tokens, 0.0012 USD",
		"├─ step 1: 100+10 tokens",
		"│  ├─ journal on web-3: ran → task inv-1-s1-c1 (succeeded), ran on i-0abc (ip-10-0-1-5)\n",
		"│  └─ rm_rf on web-3: not_offered — \"rm_rf\" is not a diagnostic offered",
		"└─ step 2: 200+20 tokens",
		"evidence cited: inv-1-s1-c1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printTask(&b, taskview.Task{ID: "inv-1-s1-c1", Outcome: "succeeded", Origin: "investigation", Parent: "t1", Investigation: "inv-1", Step: 1})
	if !strings.Contains(b.String(), "origin:     investigation inv-1 of task t1, step 1") {
		t.Errorf("show of a tool call:\n%s", b.String())
	}
}

// `autodiag show` of an investigated task prints the report as text: the
// sections, the evidence with its task ids, the grounding, the gaps and
// the tree; no JSON braces and no \n escapes in the report part, and a
// quote holding an escape sequence is shown escaped.
func TestShowReportAsText(t *testing.T) {
	a := rootcause.Answer{RootCause: "The kernel killed java.", Category: "oom_kill", Confidence: "confirmed",
		Evidence:  []rootcause.Citation{{TaskID: "inv-1-s1-c1", Quote: "Out of memory: Killed process 3131 (java) \x1b[2J", Claim: "OOM kill"}},
		NextSteps: []string{"raise the memory limit"}}
	g := &rootcause.Grounding{Cited: 2, Verified: 1, Unverified: []rootcause.Unverified{{TaskID: "t-x", Quote: "made up", Result: "unknown_task", Reason: "not a task of this investigation"}}}
	gaps := []rootcause.Gap{{Tool: "journal", Host: "web-3", Result: "rate_limited", Reason: "rule investigation"}}
	inv := &rootcause.Investigation{ID: "inv-1", Parent: "t1", EndedBy: "answer", Gaps: gaps,
		Steps: []rootcause.Step{{N: 1, Calls: []rootcause.Call{{Tool: "kernel_log", Host: "web-3", Params: map[string]string{"lines": "200"}, Result: "ran", TaskID: "inv-1-s1-c1", Outcome: "succeeded"},
			{Tool: "journal", Host: "web-3", Result: "rate_limited", Reason: "rule investigation"}}}}}
	rep, _ := json.Marshal(rootcause.Result{Status: "ok", Confidence: "confirmed", Answer: &a, Grounding: g,
		Markdown: rootcause.Render(a, g, gaps), Investigation: inv})
	var b strings.Builder
	printTask(terminalOut(&b, false), taskview.Task{ID: "t1", Outcome: "failed", Report: rep})
	out := b.String()
	part := out[strings.Index(out, "report:"):]
	if strings.ContainsAny(part, "{}") || strings.Contains(part, `\n`) || strings.Contains(part, "\x1b") {
		t.Errorf("the report part holds braces, \\n escapes or a raw escape:\n%s", part)
	}
	for _, want := range []string{"report: ok, confidence confirmed, category oom_kill", "grounding:  1 of 2 citations verified, 1 not",
		"  ROOT CAUSE\n    The kernel killed java.", "- OOM kill [task:inv-1-s1-c1]", `Killed process 3131 (java) \x1b[2J`,
		"  UNVERIFIED CITATIONS", "  GAPS\n", "could not check `journal` on web-3: rate_limited", "  NEXT STEPS\n    - raise the memory limit",
		`kernel_log on web-3 lines="200": ran → task inv-1-s1-c1`} {
		if !strings.Contains(part, want) {
			t.Errorf("show lacks %q:\n%s", want, part)
		}
	}
}
