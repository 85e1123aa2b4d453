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
