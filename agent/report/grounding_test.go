package report

import (
	"strings"
	"testing"
)

// TestGround: each citation is verified against its task's redacted
// output (whitespace normalised) or moved to Unverified with its reason;
// "confirmed" without a verified citation is lowered.
func TestGround(t *testing.T) {
	sources := map[string]Source{
		"parent":    {Output: "Filesystem Size Used\n/dev/nvme0n1p1   20G   20G     0 100% /\n", Ran: true},
		"inv-s1-c1": {Output: "[Mon] Out of memory: Killed process 3131 (java) total-vm:9123456kB\n", Ran: true},
		"inv-s1-c2": {Ran: false},
	}
	cases := []struct {
		name       string
		cite       Citation
		confidence string
		result     string
		want       string // confidence after
	}{
		{"verified", Citation{TaskID: "inv-s1-c1", Quote: "Killed process 3131 (java)"}, "confirmed", CitationVerified, "confirmed"},
		{"whitespace and backticks", Citation{TaskID: "parent", Quote: "`/dev/nvme0n1p1 20G 20G 0 100% /`"}, "confirmed", CitationVerified, "confirmed"},
		{"fabricated quote", Citation{TaskID: "inv-s1-c1", Quote: "oom-killer: killed postgres"}, "confirmed", CitationQuoteNotFound, "likely"},
		{"quote of another task", Citation{TaskID: "parent", Quote: "Killed process 3131 (java)"}, "confirmed", CitationQuoteNotFound, "likely"},
		{"unknown task", Citation{TaskID: "t-made-up", Quote: "Killed process 3131"}, "confirmed", CitationUnknownTask, "likely"},
		{"task that did not run", Citation{TaskID: "inv-s1-c2", Quote: "anything at all"}, "confirmed", CitationNotRun, "likely"},
		{"quote too short", Citation{TaskID: "parent", Quote: "20G"}, "confirmed", CitationQuoteTooShort, "likely"},
		{"likely stays likely", Citation{TaskID: "t-made-up", Quote: "whatever it is"}, "likely", CitationUnknownTask, "likely"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := Answer{RootCause: "x", Category: "oom_kill", Confidence: tc.confidence, Evidence: []Citation{tc.cite}}
			g, results := Ground(&a, sources)
			if len(results) != 1 || results[0] != tc.result || a.Confidence != tc.want || g.Cited != 1 {
				t.Fatalf("results %v confidence %s grounding %+v; want %s, %s", results, a.Confidence, g, tc.result, tc.want)
			}
			verified := tc.result == CitationVerified
			if verified != (g.Verified == 1 && len(a.Evidence) == 1 && len(g.Unverified) == 0) {
				t.Fatalf("grounding %+v evidence %+v", g, a.Evidence)
			}
			if !verified && (g.Unverified[0].Reason == "" || g.Unverified[0].Result != tc.result) {
				t.Fatalf("unverified %+v", g.Unverified)
			}
			if (tc.confidence != tc.want) != (g.Lowered != "") {
				t.Fatalf("lowered %q", g.Lowered)
			}
		})
	}
}

// TestParseAnswer: a JSON object alone or fenced is read and bounded; a
// category outside the taxonomy, a confidence outside its set or an empty
// root cause is an error naming the field.
func TestParseAnswer(t *testing.T) {
	cats := Categories([]string{"kafka_lag"})
	ok := `{"root_cause":"r","category":"kafka_lag","confidence":"Likely","evidence":[],"gaps":[],"impact":"","next_steps":[]}`
	if a, err := ParseAnswer("```json\n"+ok+"\n```", cats); err != nil || a.Confidence != "likely" || a.Category != "kafka_lag" {
		t.Fatalf("%+v %v", a, err)
	}
	for _, bad := range []struct{ text, want string }{
		{"## Root cause\nOOM", "not a JSON object"},
		{`{"root_cause":"r","category":"oom","confidence":"likely"}`, "category"},
		{`{"root_cause":"r","category":"oom_kill","confidence":"sure"}`, "confidence"},
		{`{"root_cause":"","category":"oom_kill","confidence":"likely"}`, "root_cause"},
	} {
		if _, err := ParseAnswer(bad.text, cats); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseAnswer(%q) = %v, want an error naming %s", bad.text, err, bad.want)
		}
	}
	long := `{"root_cause":"` + strings.Repeat("x", 100000) + `","category":"unknown","confidence":"inconclusive"}`
	if a, err := ParseAnswer(long, cats); err != nil || len(a.RootCause) > maxFieldBytes {
		t.Fatalf("root cause of %d bytes: %v", len(a.RootCause), err)
	}
}

// TestRender: the Markdown is the agent's, from the fields: sections,
// evidence with task ids and quotes as code spans, unverified citations,
// gaps, the confidence and why it was lowered; a field cannot start a
// section of its own.
func TestRender(t *testing.T) {
	a := Answer{RootCause: "OOM kill\n## Confidence\nconfirmed", Category: "oom_kill", Confidence: "likely",
		Evidence:  []Citation{{TaskID: "t-1", Quote: "Killed process `3131`", Claim: "the kernel killed java"}},
		NextSteps: []string{"dmesg -T | tail"}, Gaps: []string{"no heap dump"}}
	g := &Grounding{Cited: 2, Verified: 1, Lowered: "no verified citation",
		Unverified: []Unverified{{TaskID: "t-9", Quote: "made up", Result: CitationUnknownTask, Reason: "not a task of this investigation"}}}
	md := Render(a, g, []Gap{{Tool: "journal", Result: "rate_limited", Reason: "rule investigation"}})
	for _, want := range []string{"## Root cause\nOOM kill ## Confidence confirmed\n", "Category: `oom_kill`", "- the kernel killed java [task:t-1]\n  `` Killed process `3131` ``",
		"## Unverified citations", "[task:t-9]", "## Gaps\n- no heap dump\n- could not check `journal`: rate_limited (rule investigation)",
		"## Confidence\nlikely\n", "Lowered by the agent: no verified citation"} {
		if !strings.Contains(md, want) {
			t.Errorf("rendered report lacks %q:\n%s", want, md)
		}
	}
	if ParseConfidence(md) != "likely" {
		t.Errorf("confidence of the rendered report %q", ParseConfidence(md))
	}
}

// TestRunbooksValidate: report.runbooks entries need a pattern, regexps
// that compile and an absolute file; each problem names its key.
func TestRunbooksValidate(t *testing.T) {
	err := validateRunbooks([]Runbook{
		{Alert: "^Disk", File: "/etc/autodiag/runbooks/disk.md"},
		{File: "/x.md"},
		{Alert: "(", File: "x.md"},
		{Labels: map[string]string{"team": "["}, File: "/y.md"},
	})
	for _, key := range []string{"runbooks[1]", "runbooks[2].alert", "runbooks[2].file", "runbooks[3].labels.team"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("error %v does not name %s", err, key)
		}
	}
	if strings.Contains(err.Error(), "runbooks[0]") {
		t.Errorf("a valid entry refused: %v", err)
	}
}
