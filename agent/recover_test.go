package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/internal/testenv"
)

// syncBuffer is a log sink safe for the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the JSON log lines whose msg is msg.
func (s *syncBuffer) lines(msg string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(s.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestRecoveryReconcilesInflight: at start, every in-flight entry this
// instance's previous process left is reconciled. A task it left running
// is marked interrupted, audited, and the log says its message runs again
// as the next attempt if it was not deleted; a task whose record already
// has an outcome (its entry outlived the finish) keeps its record, is
// audited and logged as not running again. Both entries are removed.
func TestRecoveryReconcilesInflight(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	prefix := "autodiag-test:recover:" + randomID() + ":"
	const me = "test-host"
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		if keys, _ := rc.Keys(context.Background(), prefix+"*").Result(); len(keys) > 0 {
			rc.Del(context.Background(), keys...)
		}
		rc.Close()
	})
	ctx := context.Background()
	st := state.NewRedis(rc, state.RedisOptions{Prefix: prefix})
	// The previous process: t-run was running when it died; t-done had
	// finished, but its in-flight entry was left behind.
	if _, err := st.Claim(ctx, state.TaskRecord{ID: "t-run", Host: "web-01.example.com", Diagnostic: "echo"}, me, time.Minute); err != nil {
		t.Fatal(err)
	}
	c, err := st.Claim(ctx, state.TaskRecord{ID: "t-done", Host: "web-02.example.com", Diagnostic: "echo"}, me, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := c.Record
	done.Outcome, done.FinishedAt = outcome.Succeeded, time.Now()
	if err := st.Finish(ctx, done, state.FinishExtras{}); err != nil {
		t.Fatal(err)
	}
	entry, _ := json.Marshal(state.InflightEntry{TaskID: "t-done", Host: "web-02.example.com", Diagnostic: "echo"})
	if err := rc.HSet(ctx, prefix+"inflight:"+me, "t-done", entry).Err(); err != nil {
		t.Fatal(err)
	}

	cfg, err := config.Load([]byte(fmt.Sprintf(`
redis: {url: "redis://%s/0", prefix: %q}
diagnostics:
  - {name: echo, command: [/bin/echo, "{host}"], timeout: 10s}
limiter:
  hosts: {allow: ['^[a-z0-9-]+(\.[a-z0-9-]+)*\.example\.com$']}
  rules: []
lifecycle: {drain_timeout: 1m}
`, addr, prefix)), nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg.HostNames = append(cfg.HostNames, agentTestHosts...)
	a, closeFn, err := Open(ctx, cfg, OpenOptions{Hostname: me, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	ran := make(chan error, 1)
	go func() { ran <- a.Run(ctx) }()
	<-a.Started()
	a.Drain("test", "end of test")
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}

	if rec, ok, _ := st.Task(ctx, "t-run"); !ok || rec.Status != state.StatusInterrupted {
		t.Errorf("t-run record = %+v, want interrupted", rec)
	}
	if rec, ok, _ := st.Task(ctx, "t-done"); !ok || rec.Status != state.StatusDone || rec.Outcome != outcome.Succeeded {
		t.Errorf("t-done record = %+v, want left done with its outcome", rec)
	}
	if n, _ := rc.HLen(ctx, prefix+"inflight:"+me).Result(); n != 0 {
		t.Errorf("%d in-flight entries left, want none", n)
	}
	audit, _ := st.RecentAudit(ctx, 10)
	got := map[string]string{}
	for _, e := range audit {
		got[e.TaskID] = e.Outcome
	}
	if got["t-run"] != state.StatusInterrupted || got["t-done"] != worker.RecoveredOutcome {
		t.Errorf("audit outcomes %v, want t-run interrupted and t-done %s", got, worker.RecoveredOutcome)
	}
	interrupted := logs.lines("task interrupted")
	if len(interrupted) != 1 || interrupted[0]["task_id"] != "t-run" ||
		!strings.Contains(interrupted[0]["detail"].(string), "runs as attempt 2") {
		t.Errorf("task interrupted lines %v, want one for t-run saying it runs as attempt 2", interrupted)
	}
	removed := logs.lines("in-flight entry of the previous process removed")
	if len(removed) != 1 || removed[0]["task_id"] != "t-done" ||
		!strings.Contains(removed[0]["detail"].(string), "nothing runs it again") {
		t.Errorf("entry lines %v, want one for t-done saying nothing runs it again", removed)
	}
}
