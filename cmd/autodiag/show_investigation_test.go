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
