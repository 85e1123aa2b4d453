package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/taskview"
)

// TestPrintTaskRanOn: `autodiag show` names the machine a task ran on,
// in text and in --json's shape; a task that never ran (rate limited)
// names none.
func TestPrintTaskRanOn(t *testing.T) {
	t.Parallel()
	ran := taskview.Task{ID: "t1", Outcome: "succeeded", Owner: "i-0abc",
		RanOn: &taskview.RanOn{InstanceID: "i-0abc", Hostname: "ip-10-0-1-5"}}
	var b strings.Builder
	printTask(&b, ran)
	if want := "  ran on:     i-0abc (ip-10-0-1-5)\n"; !strings.Contains(b.String(), want) {
		t.Errorf("show:\n%s\nwant the row %q", b.String(), want)
	}
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	if err := enc.Encode(ran); err != nil {
		t.Fatal(err)
	}
	if want := `"ran_on":{"instance_id":"i-0abc","hostname":"ip-10-0-1-5"}`; !strings.Contains(js.String(), want) {
		t.Errorf("show --json: %s, want %s", js.String(), want)
	}

	limited := taskview.Task{ID: "t2", Outcome: "rate_limited", Reason: "daily_exceeded"}
	b.Reset()
	printTask(&b, limited)
	js.Reset()
	if err := enc.Encode(limited); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "ran on") || strings.Contains(js.String(), "ran_on") {
		t.Errorf("a task that never ran names a machine:\n%s\n%s", b.String(), js.String())
	}
}
