package main

import (
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/taskview"
)

// autodiag show names where the whole output is, or that its upload
// failed, in the human form.
func TestPrintTaskFullOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    taskview.Task
		want string
	}{
		{"uploaded", taskview.Task{ID: "t1", Outcome: "succeeded", OutputURL: "s3://b/p/2026/11/30/t1.txt"},
			"  full output: s3://b/p/2026/11/30/t1.txt\n"},
		{"upload failed", taskview.Task{ID: "t2", Outcome: "succeeded", OutputUpload: hooks.OutputUploadFailed},
			"  full output: upload failed (the record keeps max_output)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printTask(&b, tc.v)
			if !strings.Contains(b.String(), tc.want) {
				t.Errorf("show prints\n%s\nwant a line %q", b.String(), tc.want)
			}
		})
	}
	var b strings.Builder
	printTask(&b, taskview.Task{ID: "t3", Outcome: "succeeded"})
	if strings.Contains(b.String(), "full output") {
		t.Errorf("a task without an upload shows a full output line:\n%s", b.String())
	}
}
