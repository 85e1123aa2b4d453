package worker

import (
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
)

// A URL password the cap cuts after the password and before '@' is
// redacted before the cut: nothing of it is kept, and nothing before the
// scheme is lost.
func TestRedactBeforeCut(t *testing.T) {
	red, err := redact.New(redact.DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &pipeline{redactor: red}
	pre := strings.Repeat("x", 50) + " redis://:"
	out := pre + "Hunter2Hunter2@cache:6379\nmore\n"
	res := runner.Result{Output: []byte(out)}
	got, truncated := f.redactCut(res, runner.Size(len(pre)+7))
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

// Param values and the alert's name are redacted in the record that every
// sink and the prompt read; the task itself keeps its values for the run.
func TestRecordRedactsParamsAndAlert(t *testing.T) {
	red, err := redact.New(redact.DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	j := &job{task: task.Task{ID: "t1", Host: "h", Diagnostic: "d",
		Params: map[string]string{"url": "redis://:Hunter2Hunter2@cache:6379", "n": "5", "db_password": "s3cr3tpw"},
		Alert:  taskview.Alert{Source: "am", Name: "leak ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8"}}}
	rec := newRecord(j, red)
	for k, v := range rec.Params {
		if strings.Contains(v, "Hunter2") || strings.Contains(v, "s3cr3tpw") {
			t.Errorf("param %s kept its secret: %q", k, v)
		}
	}
	if rec.Params["n"] != "5" || !strings.HasPrefix(rec.Params["url"], "redis://:[REDACTED:") {
		t.Errorf("params %v", rec.Params)
	}
	if strings.Contains(rec.Alert.Name, "ghp_") {
		t.Errorf("alert name %q", rec.Alert.Name)
	}
	if j.task.Params["db_password"] != "s3cr3tpw" {
		t.Error("the task's own params were changed")
	}
}

// TestCutFallsAtMarkerBoundaries: the record's output cap never ends
// inside a [REDACTED:…] marker, wherever the cap falls in it: the marker
// is kept whole or left out whole, and the cut is marked.
func TestCutFallsAtMarkerBoundaries(t *testing.T) {
	red, err := redact.New(redact.DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &pipeline{redactor: red}
	out := "token ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8 and more text after it\n"
	redacted := string(red.Redact([]byte(out)))
	start := strings.Index(redacted, "[REDACTED:")
	end := start + strings.IndexByte(redacted[start:], ']') + 1
	if start < 0 || end <= start {
		t.Fatalf("no marker in %q", redacted)
	}
	for limit := start + 1; limit < end; limit++ {
		got, truncated := f.redactCut(runner.Result{Output: []byte(out)}, runner.Size(limit))
		body := strings.TrimSuffix(string(got), runner.TruncationMark)
		if !truncated || body != redacted[:start] {
			t.Errorf("cap %d (marker at %d..%d): got %q, want %q and the mark", limit, start, end, got, redacted[:start])
		}
	}
}
