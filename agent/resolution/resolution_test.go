package resolution

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

func stores(t *testing.T, clk clock.Clock) map[string]Store {
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "restest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rc.Keys(ctx, prefix+"*").Result()
		for _, k := range keys {
			rc.Del(ctx, k)
		}
		_ = rc.Close()
	})
	return map[string]Store{"memory": NewMemory(clk), "redis": NewRedis(rc, prefix)}
}

// An alert's resolution stamps resolved_at on its tasks' reports once,
// measures report → resolution by category and confidence, leaves a task
// without a report and another alert's task alone; a repeat of the
// resolution changes nothing.
func TestResolvedStampsReports(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	for name, store := range stores(t, clock.NewManual(now)) {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewManual(now)
			ctx := context.Background()
			ts := state.NewMemory(state.MemoryOptions{})
			alertA := &taskview.Alert{Source: "alertmanager", Name: "HighLoad", EventID: "fp1@2026-12-01T14:00:00Z"}
			alertB := &taskview.Alert{Source: "alertmanager", Name: "HighLoad", EventID: "fp2@2026-12-01T14:00:00Z"}
			recs := []state.TaskRecord{
				{ID: "t-report", Diagnostic: "uptime", Alert: alertA},
				{ID: "t-noreport", Diagnostic: "memory", Alert: alertA},
				{ID: "t-other", Diagnostic: "uptime", Alert: alertB},
			}
			reg := prometheus.NewPedanticRegistry()
			r, err := NewRecorder(store, ts, []string{"uptime", "memory"}, clk, time.Second, slog.New(slog.DiscardHandler), reg)
			if err != nil {
				t.Fatal(err)
			}
			var told []string
			r.Notify(func(rec state.TaskRecord) { told = append(told, rec.ID+" "+string(rec.Report)) })
			for _, rec := range recs {
				if _, err := ts.Claim(ctx, rec, "i", time.Minute); err != nil {
					t.Fatal(err)
				}
				r.TaskEnded(ctx, rec)
			}
			for _, id := range []string{"t-report", "t-other"} {
				rep, _ := json.Marshal(report.Result{Status: report.StatusOK, Confidence: "likely", CreatedAt: now.Add(-20 * time.Minute)})
				if _, err := ts.SetReport(ctx, id, rep); err != nil {
					t.Fatal(err)
				}
			}
			r.Resolved(ctx, "alertmanager", alertA.EventID+"/resolved")
			clk.Add(time.Hour)
			r.Resolved(ctx, "alertmanager", alertA.EventID+"/resolved") // Alertmanager repeats it
			resolvedAt := func(id string) *time.Time {
				rec, _, _ := ts.Task(ctx, id)
				var rep report.Result
				_ = json.Unmarshal(rec.Report, &rep)
				return rep.ResolvedAt
			}
			if at := resolvedAt("t-report"); at == nil || !at.Equal(now) {
				t.Fatalf("t-report resolved_at = %v, want %v (the first resolution)", at, now)
			}
			if len(told) != 1 || !strings.HasPrefix(told[0], "t-report ") || !strings.Contains(told[0], `"resolved_at"`) {
				t.Fatalf("told %q, want once, the task whose report was stamped, with resolved_at", told)
			}
			if resolvedAt("t-other") != nil {
				t.Fatal("another alert's report was stamped")
			}
			if rec, _, _ := ts.Task(ctx, "t-noreport"); len(rec.Report) != 0 {
				t.Fatalf("a task without a report got one: %s", rec.Report)
			}
			if log, err := r.Log(ctx); err != nil || len(log) != 1 || log[0].TaskID != "t-report" || log[0].Confidence != "likely" ||
				!log[0].ResolvedAt.Equal(now) || log[0].ResolvedAt.Sub(log[0].ReportAt) != 20*time.Minute {
				t.Fatalf("log %+v %v, want t-report's resolution 20 min after its report", log, err)
			}
			if n := testutil.ToFloat64(r.resolved.WithLabelValues("uptime", "likely", "true")); n != 1 {
				t.Fatalf("resolutions{uptime,likely,true} = %v, want 1", n)
			}
			if n := testutil.CollectAndCount(reg, "autodiag_report_resolutions_total"); n != 2*len(Confidences)*2 {
				t.Fatalf("%d series, want every category × confidence × within_1h at start", n)
			}
			if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
				t.Fatalf("promlint: %v %v", problems, err)
			}
		})
	}
}

func TestStoreIndexAndResolveOnce(t *testing.T) {
	for name, s := range stores(t, nil) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for _, id := range []string{"a", "b"} {
				if err := s.Index(ctx, "zabbix:81237", id); err != nil {
					t.Fatal(err)
				}
			}
			ids, first, err := s.Resolve(ctx, "zabbix:81237", time.Now())
			slices.Sort(ids)
			if err != nil || !first || !slices.Equal(ids, []string{"a", "b"}) {
				t.Fatalf("Resolve = %v %v %v", ids, first, err)
			}
			if _, first, _ := s.Resolve(ctx, "zabbix:81237", time.Now()); first {
				t.Fatal("a second resolution was first too")
			}
		})
	}
}

// A report written after its alert resolved gets resolved_at (the
// resolution is kept with the alert): a task indexed before the
// resolution and one that ended after it; a report made after the
// resolution is stamped but not counted (it cannot have helped); another
// alert's report is left alone.
func TestLateReportGetsResolvedAt(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	for name, store := range stores(t, clock.NewManual(now)) {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewManual(now)
			ctx := context.Background()
			ts := state.NewMemory(state.MemoryOptions{})
			alertA := &taskview.Alert{Source: "alertmanager", Name: "DiskFull", EventID: "fpA" + name + "@2026-12-01T14:00:00Z"}
			alertB := &taskview.Alert{Source: "zabbix", EventID: "991" + name}
			reg := prometheus.NewPedanticRegistry()
			r, err := NewRecorder(store, ts, []string{"disk"}, clk, time.Second, slog.New(slog.DiscardHandler), reg)
			if err != nil {
				t.Fatal(err)
			}
			early := state.TaskRecord{ID: "t-early-" + name, Diagnostic: "disk", Alert: alertA}
			late := state.TaskRecord{ID: "t-late-" + name, Diagnostic: "disk", Alert: alertA}
			other := state.TaskRecord{ID: "t-other-" + name, Diagnostic: "disk", Alert: alertB}
			for _, rec := range []state.TaskRecord{early, late, other} {
				if _, err := ts.Claim(ctx, rec, "i", time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			r.TaskEnded(ctx, early)
			r.Resolved(ctx, "alertmanager", alertA.EventID+"/resolved") // no report yet: nothing stamped
			clk.Add(10 * time.Minute)
			r.TaskEnded(ctx, late)
			r.TaskEnded(ctx, other)
			write := func(rec state.TaskRecord, created time.Time) state.TaskRecord {
				rep, _ := json.Marshal(report.Result{Status: report.StatusOK, Confidence: "likely", CreatedAt: created})
				if _, err := ts.SetReport(ctx, rec.ID, rep); err != nil {
					t.Fatal(err)
				}
				got, _, _ := ts.Task(ctx, rec.ID)
				return r.ReportWritten(ctx, got)
			}
			// The early task's report was begun before the resolution and
			// written after it: measured, 5 min.
			got := write(early, now.Add(-5*time.Minute))
			var rep report.Result
			if err := json.Unmarshal(got.Report, &rep); err != nil || rep.ResolvedAt == nil || !rep.ResolvedAt.Equal(now) {
				t.Fatalf("early report %s: want resolved_at %v, returned with the record", got.Report, now)
			}
			got = write(late, clk.Now())
			rep = report.Result{}
			if err := json.Unmarshal(got.Report, &rep); err != nil || rep.ResolvedAt == nil || !rep.ResolvedAt.Equal(now) {
				t.Fatalf("late report %s: want resolved_at %v", got.Report, now)
			}
			if stored, _, _ := ts.Task(ctx, late.ID); string(stored.Report) != string(got.Report) {
				t.Fatalf("stamp not stored: %s", stored.Report)
			}
			got = write(other, clk.Now())
			if strings.Contains(string(got.Report), "resolved_at") {
				t.Fatalf("another alert's report was stamped: %s", got.Report)
			}
			log, err := r.Log(ctx)
			if err != nil || len(log) != 1 || log[0].TaskID != early.ID || log[0].ResolvedAt.Sub(log[0].ReportAt) != 5*time.Minute {
				t.Fatalf("log %+v %v, want only the early report, 5 min", log, err)
			}
			if n := testutil.ToFloat64(r.resolved.WithLabelValues("disk", "likely", "true")); n != 1 {
				t.Fatalf("resolutions{disk,likely,true} = %v, want 1 (the report made after the resolution is not counted)", n)
			}
		})
	}
}

// A CloudWatch OK names the alarm, not the firing: it resolves the
// alarm's last firing, whose tasks' reports get resolved_at; the next
// firing of the same alarm is resolved by its own OK, and an OK with no
// known firing does nothing.
func TestAlarmClearedResolvesItsLastFiring(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	for name, store := range stores(t, clock.NewManual(now)) {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewManual(now)
			ctx := context.Background()
			ts := state.NewMemory(state.MemoryOptions{})
			r, err := NewRecorder(store, ts, []string{"uptime"}, clk, time.Second, slog.New(slog.DiscardHandler), prometheus.NewPedanticRegistry())
			if err != nil {
				t.Fatal(err)
			}
			arn := "arn:aws:cloudwatch:eu-west-1:1:alarm:StatusCheckFailed-" + name
			first, second := arn+"@2026-12-01T14:00:05.123Z", arn+"@2026-12-01T16:00:00Z"
			task := func(id, eventID string) {
				rec := state.TaskRecord{ID: id, Diagnostic: "uptime", Alert: &taskview.Alert{Source: "cloudwatch", EventID: eventID}}
				if _, err := ts.Claim(ctx, rec, "i", time.Minute); err != nil {
					t.Fatal(err)
				}
				r.TaskEnded(ctx, rec)
				rep, _ := json.Marshal(report.Result{Status: report.StatusOK, Confidence: "likely", CreatedAt: clk.Now().Add(-time.Minute)})
				if _, err := ts.SetReport(ctx, id, rep); err != nil {
					t.Fatal(err)
				}
			}
			resolvedAt := func(id string) *time.Time {
				rec, _, _ := ts.Task(ctx, id)
				var rep report.Result
				_ = json.Unmarshal(rec.Report, &rep)
				return rep.ResolvedAt
			}
			r.AlarmCleared(ctx, "cloudwatch", arn) // no firing known: nothing
			r.AlarmFiring(ctx, "cloudwatch", first)
			task("t-1", first)
			clk.Add(10 * time.Minute)
			r.AlarmCleared(ctx, "cloudwatch", arn)
			if at := resolvedAt("t-1"); at == nil || !at.Equal(now.Add(10*time.Minute)) {
				t.Fatalf("t-1 resolved_at %v, want the OK's time", at)
			}
			clk.Add(2 * time.Hour)
			r.AlarmFiring(ctx, "cloudwatch", second)
			task("t-2", second)
			if resolvedAt("t-2") != nil {
				t.Fatal("the second firing was stamped by the first OK")
			}
			clk.Add(5 * time.Minute)
			r.AlarmCleared(ctx, "cloudwatch", arn)
			if at := resolvedAt("t-2"); at == nil || !at.Equal(clk.Now()) {
				t.Fatalf("t-2 resolved_at %v, want its own OK's time %v", at, clk.Now())
			}
		})
	}
}
