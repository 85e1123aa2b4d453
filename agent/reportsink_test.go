package agent

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/outcome"
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
			rec := state.TaskRecord{ID: "t-1", Host: "web-1", Diagnostic: "disk", Outcome: outcome.Failed}
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
			write, err := hooks.OutboxReportSink(cfg, store, ob, "cli-test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
			if err != nil {
				t.Fatal(err)
			}
			res := report.Result{Status: report.StatusOK, Markdown: "**Root cause** disk full",
				Investigation: &report.Investigation{ID: "inv-1", Parent: "t-1", EndedBy: "answer", InputTokens: 10, OutputTokens: 5, CostUSD: 0.25,
					Steps: []report.Step{{N: 1, Calls: []report.Call{{Tool: "du", Host: "web-1", Result: "ran", TaskID: "t-1.1.0", Outcome: "succeeded"}}}},
					Gaps:  []report.Gap{{Tool: "cat", Result: "not_offered"}}, Evidence: []string{"t-1.1.0"}}}
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
				// The webhook posts the body as it is: the investigation's
				// steps, calls, gaps, evidence and cost are in it; Slack
				// renders them.
				var carried report.Result
				if err := json.Unmarshal(ev.Task.Report, &carried); err != nil || carried.Investigation == nil ||
					carried.Investigation.Steps[0].Calls[0].TaskID != "t-1.1.0" || carried.Investigation.Gaps[0].Tool != "cat" ||
					carried.Investigation.Evidence[0] != "t-1.1.0" || carried.Investigation.CostUSD != 0.25 {
					t.Errorf("event's report %s (%v), want the investigation", ev.Task.Report, err)
				}
				slack, _ := json.Marshal(notify.SlackMessage(ev))
				if !strings.Contains(string(slack), "task t-1.1.0 (succeeded)") || !strings.Contains(string(slack), "0.2500 USD") {
					t.Errorf("Slack message %s lacks the investigation", slack)
				}
			}
			if len(sinks) != len(tc.want) || (len(sinks) > 0 && sinks[0] != tc.want[0]) {
				t.Errorf("entries for sinks %v, want %v", sinks, tc.want)
			}
		})
	}
}

// A report written after its alert resolved (`autodiag report`, or an
// agent's report worker) gets resolved_at before its `report` event is
// written: the record and the event carry it.
func TestLateReportEventCarriesResolvedAt(t *testing.T) {
	ctx := t.Context()
	store := state.NewMemory(state.MemoryOptions{})
	rec := state.TaskRecord{ID: "t-late", Host: "web-1", Diagnostic: "disk", Outcome: outcome.Succeeded,
		Alert: &taskview.Alert{Source: "alertmanager", Name: "DiskFull", EventID: "fp@2026-12-05T05:00:00Z"}}
	if _, err := store.Claim(ctx, rec, "i-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	r, err := resolution.NewRecorder(resolution.NewMemory(nil), store, nil, nil, time.Second, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r.TaskEnded(ctx, rec)
	r.Resolved(ctx, "alertmanager", rec.Alert.EventID+"/resolved") // before the report
	ob := notify.NewMemoryOutbox(notify.MemoryOptions{})
	cfg := config.Config{Notify: []notify.SinkConfig{{Name: "oncall", Type: notify.TypeWebhook, URLEnv: "UNSET", On: []notify.EventType{notify.EventReport}}}}
	cfg.Redis.Timeout = time.Second
	write, err := hooks.OutboxReportSink(cfg, store, ob, "cli-test", slog.New(slog.DiscardHandler), r.ReportWritten)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(ctx, report.Job{ID: "t-late"}, report.Result{Status: report.StatusOK, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	got, _, _ := store.Task(ctx, "t-late")
	var stored report.Result
	if json.Unmarshal(got.Report, &stored) != nil || stored.ResolvedAt == nil {
		t.Fatalf("record's report %s, want resolved_at", got.Report)
	}
	entries, err := ob.Claim(ctx, "i-2", "oncall", 10, true)
	if err != nil || len(entries) != 1 {
		t.Fatalf("entries %v %v", entries, err)
	}
	var ev notify.Event
	if err := json.Unmarshal(entries[0].Body, &ev); err != nil || ev.Task == nil || !strings.Contains(string(ev.Task.Report), `"resolved_at"`) {
		t.Fatalf("report event %s (%v), want resolved_at in its report", entries[0].Body, err)
	}
}
