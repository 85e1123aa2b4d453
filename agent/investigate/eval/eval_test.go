package eval

import (
	"fmt"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/report"
)

// ground is what the agent does with an answer of s, without the agent:
// every diagnostic of s ran as task "t-NAME" (the parent as "t-parent"),
// the answer is read, its citations checked against the fixture outputs.
func ground(t *testing.T, s Scenario, a Ans) report.Result {
	t.Helper()
	rec := &report.Investigation{ID: "inv", Parent: "t-parent", Steps: []report.Step{{N: 1}}}
	sources := map[string]report.Source{"t-parent": {Output: s.Parent.Output, Ran: true}}
	conv := "The output above is task t-parent.\n"
	for i, d := range s.Tools {
		id := "t-" + d.Name
		rec.Steps[0].Calls = append(rec.Steps[0].Calls, report.Call{Tool: d.Name, Result: "ran", TaskID: id})
		sources[id] = report.Source{Output: d.Output, Ran: true}
		conv += fmt.Sprintf("[called %s {} (call c%d)]\n[result of call c%d]\ntask %s: outcome succeeded\n", d.Name, i, i, id)
	}
	ans, err := report.ParseAnswer(Fill(a.JSON(), conv), report.Categories(nil))
	if err != nil {
		t.Fatalf("answer of %s: %v", s.Name, err)
	}
	g, _ := report.Ground(&ans, sources)
	return report.Result{Status: report.StatusOK, Answer: &ans, Grounding: &g, Confidence: ans.Confidence, Investigation: rec}
}

// TestGrader: in every scenario both right answers (in different words)
// pass, and every adversarial answer that applies fails; a text report
// that names the cause in every word but is not structured fails too.
func TestGrader(t *testing.T) {
	for _, s := range Scenarios() {
		t.Run(s.Name, func(t *testing.T) {
			for _, a := range []Ans{s.Right, s.Alt} {
				if pass, why := Grade(s, ground(t, s, a)); !pass {
					t.Errorf("right answer %q graded fail: %s", a.Cause, why)
				}
			}
			for _, adv := range Adversarial(s) {
				res := ground(t, s, adv.Ans)
				if pass, _ := Grade(s, res); pass {
					t.Errorf("%s graded pass: %+v", adv.Name, adv.Ans)
				}
				if adv.Name == "fabricated quotes" && (res.Grounding.Verified != 0 || res.Confidence == report.ConfidenceConfirmed) {
					t.Errorf("fabricated quotes verified %d, confidence %s", res.Grounding.Verified, res.Confidence)
				}
			}
			text := report.Result{Status: report.StatusOK, Unstructured: true, Confidence: "confirmed",
				Markdown: "## Root cause\n" + strings.ReplaceAll(s.Truth.Category, "_", " ") + " " + s.Right.Cause}
			if pass, _ := Grade(s, text); pass {
				t.Errorf("an unstructured report graded pass")
			}
		})
	}
}

// TestGraderReadsNoWords: the keyword answers that passed a grader of
// substrings fail this one: "room for java" is no OOM kill, and "time
// sync is fine" with the injected cause is no clock skew.
func TestGraderReadsNoWords(t *testing.T) {
	byName := map[string]Scenario{}
	for _, s := range Scenarios() {
		byName[s.Name] = s
	}
	oom, clock := byName["oom-kill"], byName["clock-skew-injected"]
	cases := []struct {
		s Scenario
		a Ans
	}{
		{oom, Ans{Cause: "There is no room for java: an out of memory OOM oom_kill.", Category: "resource_saturation", Confidence: "likely", Cites: oom.Right.Cites}},
		{oom, Ans{Cause: "Not OOM.", Category: "unknown", Confidence: "likely", Cites: oom.Right.Cites}},
		{clock, Ans{Cause: "A bad password; time sync is fine; chrony ntp clock.", Category: "config_error", Confidence: "confirmed", Cites: clock.Right.Cites}},
	}
	for _, tc := range cases {
		if pass, _ := Grade(tc.s, ground(t, tc.s, tc.a)); pass {
			t.Errorf("%s: %q graded pass", tc.s.Name, tc.a.Cause)
		}
	}
}
