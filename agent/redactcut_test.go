package agent

import (
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
)

// A URL password the cap cuts after the password and before '@' is
// redacted before the cut: nothing of it is kept, and nothing before the
// scheme is lost.
func TestRedactBeforeCut(t *testing.T) {
	red, err := redact.New(redact.DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &pipeline{redactor: red}
	pre := strings.Repeat("x", 50) + " redis://:"
	out := pre + "Hunter2Hunter2@cache:6379\nmore\n"
	res := runner.Result{Output: []byte(out)}
	got, truncated := p.redactCut(res, runner.Diagnostic{MaxOutput: runner.Size(len(pre) + 7)})
	if !truncated {
		t.Error("not marked truncated")
	}
	if strings.Contains(string(got), "Hunter") || !strings.HasPrefix(string(got), pre) {
		t.Errorf("got %q, want %q and the mark", got, pre)
	}
	if !strings.HasSuffix(string(got), runner.TruncationMark) {
		t.Errorf("got %q, no truncation mark", got)
	}
}
