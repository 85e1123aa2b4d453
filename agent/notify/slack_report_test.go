package notify

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/investigate"
	"github.com/autodiag/autodiag/agent/report"
)

func reportEvent(t *testing.T, r report.Result) Event {
	t.Helper()
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	ev := testEvent()
	ev.Type = EventReport
	ev.Task.Report = raw
	return ev
}

func investigation() report.Result {
	return report.Result{Status: report.StatusOK, Confidence: report.ConfidenceLikely, Provider: "openai", Model: "gpt-x",
		InputTokens: 900, OutputTokens: 120,
		Markdown: "## Cause\n/var is full: app.log grows <fast> & unrotated (t-42.1.0)\n",
		Investigation: &report.Investigation{ID: "inv-1", Parent: "t-42", EndedBy: "answer", InputTokens: 4100, OutputTokens: 300, CostUSD: 0.0123,
			Steps: []report.Step{{N: 1, InputTokens: 2000, OutputTokens: 100, LatencyS: 1.2, Calls: []report.Call{
				{Tool: "du-top", Host: "web-1.example.com", Params: map[string]string{"path": "/var"}, Result: "ran", TaskID: "t-42.1.0", Outcome: "succeeded"},
				{Tool: "cat-shadow", Host: "web-1.example.com", Result: "not_offered", Reason: `"cat-shadow" is not a diagnostic offered to investigations`},
			}}, {N: 2, InputTokens: 2100, OutputTokens: 200, LatencyS: 2.5}},
			Gaps:     []report.Gap{{Tool: "cat-shadow", Host: "web-1.example.com", Result: "not_offered", Reason: "not offered"}},
			Evidence: []string{"t-42", "t-42.1.0"}}}
}

// TestSlackReportRendersTheInvestigation: a report event's message shows the
// answer, the steps with each tool call's task id and outcome, the gaps,
// the evidence, the tokens and the cost.
func TestSlackReportRendersTheInvestigation(t *testing.T) {
	msg := SlackMessage(reportEvent(t, investigation()))
	b, err := json.MarshalIndent(msg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "slack_report.json", append(b, '\n'))
	var all strings.Builder
	for _, bl := range msg.Blocks {
		if bl.Text != nil {
			all.WriteString(bl.Text.Text + "\n")
		}
		for _, f := range bl.Fields {
			all.WriteString(f.Text + "\n")
		}
	}
	for _, want := range []string{
		"/var is full: app.log grows &lt;fast&gt; &amp; unrotated", // the answer, escaped
		"step 1", "step 2", "du-top", "task t-42.1.0 (succeeded)", // steps, calls, task ids, outcomes
		"cat-shadow on web-1.example.com: not_offered (not offered)", // gaps
		"*Evidence* (task ids): t-42, t-42.1.0",
		"4100 in, 300 out", "0.0123 USD", "2 steps, 2 tool calls, ended by answer", "likely",
	} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("message lacks %q:\n%s", want, all.String())
		}
	}
}

// TestSlackReportWithinLimits: the largest investigation the budgets allow,
// with hostile lengths everywhere, stays within Block Kit's limits.
func TestSlackReportWithinLimits(t *testing.T) {
	r := investigation()
	r.Markdown = strings.Repeat("a claim with <markup> & more, citing t-42 ", 1000)
	r.Reason = strings.Repeat("r", 5000)
	inv := r.Investigation
	inv.Steps = nil
	inv.Gaps = nil
	for s := 1; s <= investigate.MaxSteps; s++ {
		st := report.Step{N: s}
		for c := 0; c < 10; c++ {
			st.Calls = append(st.Calls, report.Call{Tool: strings.Repeat("t", 64), Host: strings.Repeat("h", 255),
				Params: map[string]string{"p": strings.Repeat("<v>", 300)}, Result: "bad_arguments", Reason: strings.Repeat("x", 1000)})
			inv.Gaps = append(inv.Gaps, report.Gap{Tool: "t", Host: "h", Result: "bad_arguments", Reason: strings.Repeat("<y>\n", 500)})
		}
		inv.Steps = append(inv.Steps, st)
	}
	for i := 0; i < 500; i++ {
		inv.Evidence = append(inv.Evidence, fmt.Sprintf("t-%040d", i))
	}
	msg := SlackMessage(reportEvent(t, r))
	if len(msg.Blocks) > 50 {
		t.Errorf("%d blocks", len(msg.Blocks))
	}
	total := 0
	for _, b := range msg.Blocks {
		if b.Text != nil {
			total += len(b.Text.Text)
			if len(b.Text.Text) > slackSectionMax {
				t.Errorf("%s block: %d bytes", b.Type, len(b.Text.Text))
			}
			if strings.ContainsAny(strings.NewReplacer("&lt;", "", "&gt;", "", "&amp;", "").Replace(b.Text.Text), "<>") {
				t.Errorf("%s block not escaped", b.Type)
			}
		}
		if len(b.Fields) > 10 {
			t.Errorf("%d fields in a section", len(b.Fields))
		}
		for _, f := range b.Fields {
			if len(f.Text) > slackFieldMax {
				t.Errorf("field: %d bytes", len(f.Text))
			}
		}
	}
	if !strings.Contains(msg.Blocks[len(msg.Blocks)-2].Text.Text, "autodiag show t-42") {
		t.Errorf("the cut evidence does not say where the whole is")
	}
	if total > 6*slackSectionMax+2*slackHeaderMax {
		t.Errorf("message text %d bytes", total)
	}
}

// TestSlackStructuredReport: a structured report reaches Slack as mrkdwn
// (headings in bold, bullets as •, quotes as code spans, no raw ##), with
// the confidence as a word and an emoji, the category and the grounding.
func TestSlackStructuredReport(t *testing.T) {
	a := report.Answer{RootCause: "The kernel killed java.", Category: "oom_kill", Confidence: "confirmed",
		Evidence: []report.Citation{{TaskID: "t-42.1.0", Quote: "Killed process 3131 (java)", Claim: "OOM kill"}}, NextSteps: []string{"raise **the** limit"}}
	g := &report.Grounding{Cited: 2, Verified: 1, Unverified: []report.Unverified{{TaskID: "t-9", Quote: "x", Result: "unknown_task", Reason: "r"}}}
	r := report.Result{Status: report.StatusOK, Confidence: "confirmed", Answer: &a, Grounding: g, Markdown: report.Render(a, g, nil)}
	msg := SlackMessage(reportEvent(t, r))
	var all strings.Builder
	for _, bl := range msg.Blocks {
		if bl.Text != nil {
			all.WriteString(bl.Text.Text + "\n")
		}
		for _, f := range bl.Fields {
			all.WriteString(f.Text + "\n")
		}
	}
	text := all.String()
	if strings.Contains(text, "##") {
		t.Errorf("raw Markdown headings in Slack:\n%s", text)
	}
	for _, want := range []string{"*Root cause*\nThe kernel killed java.", "• OOM kill [task:t-42.1.0]", "`Killed process 3131 (java)`",
		"• raise *the* limit", "🟢 confirmed", "oom_kill", "1 of 2 citations verified"} {
		if !strings.Contains(text, want) {
			t.Errorf("message lacks %q:\n%s", want, text)
		}
	}
}
