package hooks

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/outcome"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestTaskJSON")

// taskRecords are the records TestTaskJSON shapes: every field set, a
// run that did not start (exit code -1; it was tried on an agent, which
// ran_on names), and a task that never ran (rate limited, from an old
// record without the newer fields; no ran_on).
func taskRecords() map[string]state.TaskRecord {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.FixedZone("BRT", -3*3600))
	full := state.TaskRecord{ID: "t-1", Status: state.StatusDone, Owner: "i-0abc", Attempts: 2, Host: "web-1",
		Diagnostic: "df", StartedAt: at, FinishedAt: at.Add(1500 * time.Millisecond), ExitCode: new(3),
		Output: "line 1\nline 2\n", Truncated: true, Outcome: outcome.Failed, Reason: "exit status 3",
		Params: map[string]string{"path": "/var", "depth": "2"}, Severity: "critical",
		Origin: "investigation", Parent: "t-0", Investigation: "inv-1", Step: 2,
		Alert:      &taskview.Alert{Source: "alertmanager", Name: "DiskFull", EventID: "ev-9"},
		ReceivedAt: at.Add(-time.Second), OutputURL: "s3://bucket/t-1.txt", OutputUpload: "failed",
		Limiter: json.RawMessage(`{"rule":"default","allowed":true}`), Report: json.RawMessage(`{"status":"ok"}`),
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7",
		RanOn: &taskview.RanOn{InstanceID: "i-0abc", Hostname: "ip-10-0-1-5"}}
	notStarted := state.TaskRecord{ID: "t-2", Status: state.StatusDone, Attempts: 1, Host: "web-2", Diagnostic: "df",
		ExitCode: new(-1), Outcome: outcome.Failed, Reason: "start /nonexistent: no such file", FinishedAt: at,
		RanOn: &taskview.RanOn{InstanceID: "i-0def", Hostname: "ip-10-0-2-7"}}
	limited := state.TaskRecord{ID: "t-3", Status: state.StatusDone, Host: "web-3", Diagnostic: "uptime",
		Outcome: outcome.RateLimited, Reason: "daily", Limiter: json.RawMessage(`{"rule":"default","limit":"daily"}`)}
	return map[string]state.TaskRecord{"full": full, "not_started": notStarted, "limited": limited}
}

// TestTaskJSON pins the wire JSON of a task in each of its shapes: the
// stored record, GET /v1/tasks/{id} (and `autodiag show --json`), a
// webhook's event, and the evidence a report's prompt carries. They are
// the README's contract: a change here is a change of the contract.
// Regenerate with `go test ./agent/hooks -run TestTaskJSON -update` only
// for a deliberate addition.
func TestTaskJSON(t *testing.T) {
	diag := &runner.Diagnostic{Name: "df", Command: []string{"/bin/df", "-h", "{param.path}"}, Params: map[string]string{"path": ".*"}}
	at := time.Date(2026, 11, 30, 15, 0, 2, 0, time.UTC)
	tracing.SetLinkTemplate("https://traces.example/trace/{trace_id}")
	for name, rec := range taskRecords() {
		view := rec.View(tracing.Link)
		shapes := map[string]any{
			"record":   rec,
			"view":     view,
			"event":    notify.Event{Type: notify.EventType(rec.Outcome), ID: "d-1", InstanceID: "i-0abc", Time: at, Task: &view},
			"evidence": EvidenceOf(rec, diag),
		}
		for shape, v := range shapes {
			t.Run(name+"/"+shape, func(t *testing.T) {
				got, err := json.MarshalIndent(v, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, '\n')
				file := filepath.Join("testdata", "task_"+name+"_"+shape+".json")
				if *update {
					if err := os.WriteFile(file, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(want) {
					t.Errorf("%s changed:\n got %s\nwant %s", file, got, want)
				}
			})
		}
	}
}

// TestRecordAcrossVersions pins what a rolling upgrade needs of the
// stored record, against testdata/task_*_record_main.json: the records
// of taskRecords as agents wrote them before the record's fields were
// folded into taskview.Task (frozen; -update leaves them alone).
//
// Forward: this version reads each frozen record to the record it was
// written from (equal re-encoded, where a wrong value shows: a nil
// report is left out, null is not; the exit code is compared by Exit).
// Backward: what this
// version writes reads in an earlier agent to the values the frozen
// record does. That agent decodes with encoding/json into a struct whose
// fields are strings, ints, bools, times, maps, pointers and
// json.RawMessage, so a key absent and a key holding "", 0 or false read
// alike; anything else (null above all: a RawMessage reads it as a
// value) must be byte for byte the same.
func TestRecordAcrossVersions(t *testing.T) {
	for name, rec := range taskRecords() {
		t.Run(name, func(t *testing.T) {
			frozen, err := os.ReadFile(filepath.Join("testdata", "task_"+name+"_record_main.json"))
			if err != nil {
				t.Fatal(err)
			}
			written, err := json.Marshal(rec)
			if err != nil {
				t.Fatal(err)
			}

			var read state.TaskRecord
			if err := json.Unmarshal(frozen, &read); err != nil {
				t.Fatal(err)
			}
			// An earlier record of a task that never ran says exit_code 0,
			// read now as a pointer to 0 where this version keeps nil;
			// every reader goes through Exit or View, where the two are
			// the same.
			if read.Exit() != rec.Exit() {
				t.Errorf("forward: exit code %d, want %d", read.Exit(), rec.Exit())
			}
			read.ExitCode = rec.ExitCode
			reread, err := json.Marshal(read)
			if err != nil {
				t.Fatal(err)
			}
			if string(reread) != string(written) {
				t.Errorf("forward: the earlier record reads as\n%s\nwant\n%s", reread, written)
			}

			var was, is map[string]json.RawMessage
			if err := json.Unmarshal(frozen, &was); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(written, &is); err != nil {
				t.Fatal(err)
			}
			keys := slices.Concat(slices.Collect(maps.Keys(was)), slices.Collect(maps.Keys(is)))
			slices.Sort(keys)
			for _, k := range slices.Compact(keys) {
				a, aok := was[k]
				b, bok := is[k]
				switch {
				case aok && bok:
					if !jsonEqual(t, a, b) {
						t.Errorf("backward: %q was %s, is %s", k, a, b)
					}
				case !zeroJSON(a) || !zeroJSON(b):
					t.Errorf("backward: %q was %s, is %s: an absent key does not read as that", k, a, b)
				}
			}
		})
	}
}

// zeroJSON reports whether v (nil: the key is absent) decodes into a
// string, int or bool field as its zero value, as an absent key does.
func zeroJSON(v json.RawMessage) bool {
	switch string(v) {
	case "", `""`, "0", "false":
		return true
	}
	return false
}

func jsonEqual(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var ca, cb bytes.Buffer
	if err := json.Compact(&ca, a); err != nil {
		t.Fatal(err)
	}
	if err := json.Compact(&cb, b); err != nil {
		t.Fatal(err)
	}
	return ca.String() == cb.String()
}
