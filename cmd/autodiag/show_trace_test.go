package main

import (
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/taskview"
)

// TestPrintTaskTrace: `autodiag show` prints the task's trace id and its
// link; a task without a trace has no trace row.
func TestPrintTaskTrace(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	printTask(&b, taskview.Task{ID: "t1", Outcome: "succeeded", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
		TraceURL: "https://tempo.example/trace/4bf92f3577b34da6a3ce929d0e0e4736"})
	if want := "  trace:      4bf92f3577b34da6a3ce929d0e0e4736 https://tempo.example/trace/4bf92f3577b34da6a3ce929d0e0e4736\n"; !strings.Contains(b.String(), want) {
		t.Errorf("show:\n%s\nwant the row %q", b.String(), want)
	}
	b.Reset()
	printTask(&b, taskview.Task{ID: "t2", Outcome: "succeeded"})
	if strings.Contains(b.String(), "trace:") {
		t.Errorf("show of an untraced task:\n%s", b.String())
	}
}
