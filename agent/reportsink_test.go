package agent

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/worker"
)

// hooks.OutboxReportSink stores the report and writes one `report` entry per sink
// that wants it, without the sinks' URL or secret variables; with no such
// sink, the record only.
func TestOutboxReportSink(t *testing.T) {
	sink := func(name string, on ...notify.EventType) notify.SinkConfig {
		return notify.SinkConfig{Name: name, Type: notify.TypeWebhook, URLEnv: "UNSET_URL_" + name, SecretEnv: "UNSET_SECRET", On: on}
	}
	for _, tc := range []struct {
		name  string
		sinks []notify.SinkConfig
		want  []string // sinks that get an entry
	}{
		{"no sinks", nil, nil},
		{"a sink that wants report", []notify.SinkConfig{sink("oncall", notify.EventFailed, notify.EventReport)}, []string{"oncall"}},
		{"a sink that does not", []notify.SinkConfig{sink("pager", notify.EventFailed)}, nil},
		{"two sinks, one wants it", []notify.SinkConfig{sink("pager", notify.EventFailed), sink("oncall", notify.EventReport)},
			[]string{"oncall"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			store := state.NewMemory(state.MemoryOptions{})
			rec := state.TaskRecord{ID: "t-1", Host: "web-1", Diagnostic: "disk", Outcome: worker.OutcomeFailed}
			if _, err := store.Claim(ctx, rec, "i-1", time.Minute); err != nil {
				t.Fatal(err)
			}
			rec.Status, rec.Owner, rec.Attempts = state.StatusDone, "i-1", 1
			if err := store.Finish(ctx, rec, state.FinishExtras{}); err != nil {
				t.Fatal(err)
			}
			ob := notify.NewMemoryOutbox(notify.MemoryOptions{})
			cfg := config.Config{Notify: tc.sinks}
			cfg.Redis.Timeout = time.Second
			write, err := hooks.OutboxReportSink(cfg, store, ob, "cli-test", slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			res := report.Result{Status: report.StatusOK, Markdown: "**Root cause** disk full"}
			if err := write(ctx, report.Job{ID: "t-1"}, res); err != nil {
				t.Fatal(err)
			}
			got, _, _ := store.Task(ctx, "t-1")
			var stored report.Result
			if json.Unmarshal(got.Report, &stored) != nil || stored.Status != report.StatusOK {
				t.Errorf("record's report %s, want the ok report", got.Report)
			}
			var entries []notify.Delivery
			for _, sc := range tc.sinks {
				got, err := ob.Claim(ctx, "i-2", sc.Name, 10, true)
				if err != nil {
					t.Fatal(err)
				}
				entries = append(entries, got...)
			}
			var sinks []string
			for _, e := range entries {
				sinks = append(sinks, e.Sink)
				var ev notify.Event
				if err := json.Unmarshal(e.Body, &ev); err != nil || e.Event != notify.EventReport || ev.Task == nil ||
					ev.Task.ID != "t-1" || e.Origin != "cli-test" {
					t.Errorf("entry %+v (%v), want the report event of t-1 from cli-test", e.Entry, err)
				}
			}
			if len(sinks) != len(tc.want) || (len(sinks) > 0 && sinks[0] != tc.want[0]) {
				t.Errorf("entries for sinks %v, want %v", sinks, tc.want)
			}
		})
	}
}
