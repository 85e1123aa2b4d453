package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestStandaloneIntakeRecordsResolutions: a Zabbix recovery sent to the
// standalone `autodiag intake` stamps resolved_at on the report of the
// task its problem made, in the fleet's Redis, as the agent's intake
// does, and writes the alert's `resolved` event to the fleet's outbox for
// the agents to deliver (once, to the sink that wants it); it sends no
// task.
func TestStandaloneIntakeRecordsResolutions(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "x")
	addr := testenv.RedisAddr(t)
	prefix := "intakeres:" + strings.ReplaceAll(t.Name(), "/", "_") + ":" + time.Now().Format("150405.000000") + ":"
	cfg, err := config.Load([]byte(`
queue: {url: 'http://127.0.0.1:1/000000000000/tasks'}
redis: {addrs: ['`+addr+`'], prefix: '`+prefix+`'}
intake:
  addr: 127.0.0.1:0
  auth: {bearer_token_env: TOKEN}
diagnostics:
  - {name: disk, command: [/bin/echo, "{host}"], timeout: 10s}
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
notify:
  - {name: hook, type: webhook, url: "http://127.0.0.1:1/hook", allow_http: true, on: [resolved]}
  - {name: other, type: webhook, url: "http://127.0.0.1:1/other", allow_http: true, on: [failed]}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		keys, _ := rc.Keys(ctx, prefix+"*").Result()
		for _, k := range keys {
			rc.Del(ctx, k)
		}
		_ = rc.Close()
	})
	// The problem's task, as an agent ended it: its record with a report,
	// indexed under its alert.
	store := state.NewRedis(rc, state.RedisOptions{Prefix: prefix})
	rec := state.TaskRecord{ID: "t-disk", Host: "db-01.prod.example.com", Diagnostic: "disk",
		Alert: &taskview.Alert{Source: "zabbix", EventID: "81237"}}
	if _, err := store.Claim(ctx, rec, "i-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	created := time.Now().UTC().Add(-10 * time.Minute)
	rep, _ := json.Marshal(report.Result{Status: report.StatusOK, Confidence: "likely", CreatedAt: created})
	if _, err := store.SetReport(ctx, rec.ID, rep); err != nil {
		t.Fatal(err)
	}
	if err := resolution.NewRedis(rc, prefix).Index(ctx, resolution.Key("zabbix", "81237"), rec.ID); err != nil {
		t.Fatal(err)
	}

	in, err := open.StandaloneListener(t.Context(), cfg, open.Options{Logger: slog.New(slog.DiscardHandler)},
		func(k string) (string, bool) { return "tok", k == "TOKEN" })
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	body, err := os.ReadFile("alert/testdata/zabbix6_recovery.json")
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/alerts/zabbix", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	in.Handler.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("recovery answered %d %s", w.Code, w.Body)
	}
	got, _, err := store.Task(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	var r report.Result
	if err := json.Unmarshal(got.Report, &r); err != nil || r.ResolvedAt == nil || r.ResolvedAt.Before(created) {
		t.Fatalf("report %s: want resolved_at stamped by the standalone intake", got.Report)
	}
	mfs, err := in.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "autodiag_report_resolutions_total"
	}
	if !found {
		t.Fatal("the standalone intake's /metrics has no autodiag_report_resolutions_total")
	}
	ob := notify.NewRedisOutbox(rc, notify.RedisOptions{Prefix: prefix})
	for sink, want := range map[string]int{"hook": 1, "other": 0} {
		ds, err := ob.Claim(ctx, "test", sink, 10, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != want {
			t.Fatalf("outbox of %s: %d entries, want %d", sink, len(ds), want)
		}
		for _, d := range ds {
			var ev notify.Event
			if err := json.Unmarshal(d.Body, &ev); err != nil || d.Event != notify.EventResolved || ev.Task == nil || ev.Task.ID != rec.ID {
				t.Fatalf("outbox of %s: %s event %s (%v), want resolved of %s", sink, d.Event, d.Body, err, rec.ID)
			}
		}
	}
}
