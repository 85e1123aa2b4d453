package report

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/taskview"
)

func testConfig() Config {
	c := DefaultConfig()
	c.Enabled = true
	c.Model = testModel
	c.Timeout = 2 * time.Second
	return c
}

func testRedactor(t *testing.T) *redact.Redactor {
	t.Helper()
	r, err := redact.New(redact.DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func evidence() Evidence {
	code := 1
	return Evidence{TaskID: "t1", Alert: EvidenceAlert{Alert: taskview.Alert{Source: "alertmanager", Name: "DiskFull", EventID: "e1"}, Severity: "critical"},
		Diagnostic: "disk", Argv: []string{"df", "-h"}, Host: "10.0.0.1", ExitCode: &code, Outcome: "failed",
		Duration: Seconds(1500 * time.Millisecond), Output: "Filesystem Size Used Avail Use% Mounted on\n/dev/xvda1 8G 8G 0 100% /\n"}
}

func TestGenerateFaults(t *testing.T) {
	cases := []struct {
		name     string
		script   []fault
		always   fault
		latency  time.Duration
		status   string
		reason   string
		attempts int // 0: more than one, not counted
	}{
		{name: "ok", status: StatusOK, attempts: 1},
		{name: "429 then ok", script: []fault{fThrottle, fThrottle}, status: StatusOK, attempts: 3},
		{name: "500 then ok", script: []fault{f500}, status: StatusOK, attempts: 2},
		{name: "429 storm", always: fThrottle, status: StatusFailed, reason: "429"},
		// Answers as slow as a loaded machine makes them: the timeout cuts
		// the last try short, and the reason still names the 429.
		{name: "429 storm, slow answers", always: fThrottle, latency: 300 * time.Millisecond, status: StatusFailed, reason: "429"},
		{name: "provider down (500)", always: f500, status: StatusFailed, reason: "500"},
		{name: "malformed", always: fGarbage, status: StatusFailed, reason: "after 1 attempt", attempts: 1},
		{name: "empty", always: fEmpty, status: StatusFailed, reason: "empty answer", attempts: 1},
		{name: "cut at max_tokens", always: fLength, status: StatusFailed, reason: "max_tokens", attempts: 1},
		{name: "model does not exist", always: fNoModel, status: StatusFailed, reason: "after 1 attempt", attempts: 1},
		{name: "slow", latency: time.Hour, status: StatusFailed, reason: "no answer within 2s", attempts: 1},
	}
	for name, mk := range providers(t) {
		for _, tc := range cases {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				fp := mk(t)
				fp.script(tc.script...)
				fp.always(tc.always)
				fp.latency(tc.latency)
				cfg := testConfig()
				g := NewGenerator(cfg, fp.p, testRedactor(t), nil)
				g.initialBackoff = 10 * time.Millisecond
				start := time.Now()
				res := g.Generate(context.Background(), evidence())
				// The bound: the timeout, plus one backoff step at most
				// overrunning it is excluded by the loop, plus slack for
				// the race detector on a shared machine.
				if el := time.Since(start); el > cfg.Timeout+time.Second {
					t.Fatalf("took %s, timeout %s", el, cfg.Timeout)
				}
				if res.Status != tc.status || !strings.Contains(res.Reason, tc.reason) {
					t.Fatalf("status %q reason %q, want %q containing %q", res.Status, res.Reason, tc.status, tc.reason)
				}
				if tc.attempts > 0 && res.Attempts != tc.attempts {
					t.Fatalf("attempts %d, want %d", res.Attempts, tc.attempts)
				}
				if tc.attempts == 0 && res.Attempts < 2 {
					t.Fatalf("attempts %d, want retries", res.Attempts)
				}
				if res.Provider != name || res.Model != testModel || res.CreatedAt.IsZero() {
					t.Fatalf("result %+v", res)
				}
				if res.Status == StatusOK && (res.Confidence == "" || res.Markdown == "" || res.InputTokens == 0) {
					t.Fatalf("ok result %+v", res)
				}
				if tc.name == "cut at max_tokens" && (!res.Truncated || res.FinishReason == "" || res.Markdown == "") {
					t.Fatalf("cut result %+v", res)
				}
			})
		}
	}
}

// TestGenerateRedactsAnswer: a model quoting a secret does not put it in
// the record.
func TestGenerateRedactsAnswer(t *testing.T) {
	f, p := newOpenAIFake(t)
	f.SetReply("## Root cause\nkey AKIAIOSFODNN7EXAMPLE leaked\n## Confidence\nlikely")
	res := NewGenerator(testConfig(), p, testRedactor(t), nil).Generate(context.Background(), evidence())
	if strings.Contains(res.Markdown, "AKIAIOSFODNN7EXAMPLE") || !strings.Contains(res.Markdown, "[REDACTED:") {
		t.Fatalf("markdown %q", res.Markdown)
	}
}

func TestParseConfidence(t *testing.T) {
	for in, want := range map[string]string{
		"## Confidence\nlikely\n":                   "likely",
		"**Confidence:** Confirmed":                 "confirmed",
		"## Confidence\n\nInconclusive.":            "inconclusive",
		"Confidence - likely":                       "likely",
		"## Root cause\nunknown\n":                  "",
		"likely the disk\n## Confidence\nconfirmed": "confirmed",
	} {
		if got := ParseConfidence(in); got != want {
			t.Errorf("ParseConfidence(%q) = %q, want %q", in, got, want)
		}
	}
}
