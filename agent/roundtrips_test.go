package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/internal/testenv"
	"github.com/autodiag/autodiag/limiter"
)

// TestTaskScriptCallsOnOneRedis: a task under a concurrency rule costs a
// standalone Redis two script calls, counted from MONITOR: the claim
// with the limiter's decision in its script, then the final record with
// the slot's release in its script (see state.TestRedisFinishFoldsCalls);
// no allow.lua or held.lua call of its own. The slot is free once the
// outcome is counted.
func TestTaskScriptCallsOnOneRedis(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "autodiag-test:roundtrips:" + hex.EncodeToString(b[:]) + ":"
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	ctx := context.Background()
	t.Cleanup(func() {
		if keys, _ := rc.Keys(context.Background(), prefix+"*").Result(); len(keys) > 0 {
			rc.Del(context.Background(), keys...)
		}
	})
	ta := startAgent(t, fmt.Sprintf(`
redis: {url: "redis://%s/0", prefix: %q}
diagnostics:
  - {name: echo, command: [/bin/echo, "{host}"], timeout: 10s}
limiter:
  rules: [{name: cap, key: host, limits: [{concurrency: 2}]}]
lifecycle: {drain_timeout: 1m}
`, addr, prefix))
	// A first task loads the scripts (a cold cache costs an EVAL more).
	ta.post(t, `{"id":"rt-warm","host":"web-01","diagnostic":"echo"}`)
	waitFor(t, "warm-up task", func() bool { return ta.outcome(outcome.Succeeded) == 1 })
	const id = "rt-task-1"
	end := prefix + "end"
	got := testenv.Commands(ctx, t, addr, id, end, func() {
		ta.post(t, `{"id":"`+id+`","host":"web-01","diagnostic":"echo"}`)
		waitFor(t, "task", func() bool { return ta.outcome(outcome.Succeeded) == 2 })
	}, func() {
		if err := rc.Echo(ctx, end).Err(); err != nil {
			t.Fatal(err)
		}
	})
	var scripts []string
	for _, c := range got {
		if !strings.HasPrefix(c, "lua:") {
			scripts = append(scripts, c)
		}
	}
	if want := []string{"evalsha", "evalsha"}; fmt.Sprint(scripts) != fmt.Sprint(want) {
		t.Errorf("the task's calls naming it: %v, want %v (claim+decision, finish+slot release)", scripts, want)
	}
	if n, err := rc.ZCard(ctx, prefix+"lim:{web-01}:c:cap").Result(); err != nil || n != 0 {
		t.Errorf("slots held after the task ended: %d (%v), want 0", n, err)
	}
}

// lostReplyStore is a Memory store whose first Finish lands, with its
// calls, and then reports an error, as a finish whose reply was lost.
type lostReplyStore struct {
	state.Store
	finishes atomic.Int64
	calls    atomic.Int64 // FinishExtras.Calls received over every Finish
}

func (s *lostReplyStore) Finish(ctx context.Context, rec state.TaskRecord, x state.FinishExtras) error {
	s.calls.Add(int64(len(x.Calls)))
	err := s.Store.Finish(ctx, rec, x)
	if s.finishes.Add(1) == 1 && err == nil {
		return errors.New("reply lost")
	}
	return err
}

// TestRetriedFinishGivesBackOnce: the slot release of a failed run rides
// with its finish; when that finish is kept in the backlog (its reply was
// lost) and written again, the release is not sent again, so the failure
// breaker counts the run's failure once and the slot is given back once.
func TestRetriedFinishGivesBackOnce(t *testing.T) {
	t.Parallel()
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rc.Close()
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "autodiag-test:retriedfinish:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		if keys, _ := rc.Keys(context.Background(), prefix+"*").Result(); len(keys) > 0 {
			rc.Del(context.Background(), keys...)
		}
	})
	cfg, err := config.Load([]byte(`
workers: 1
queue: {visibility_timeout: 1m}
diagnostics:
  - {name: check, command: [/bin/false], timeout: 10s}
limiter:
  hosts: {allow: ['^[a-z0-9.-]+$']}
  rules: [{name: cap, key: host, limits: [{concurrency: 2}], breaker: {failures: 3, window: 1h, open_for: 1h}}]
lifecycle: {drain_timeout: 1m}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(cfg.Limiter.Config, limiter.NewRedis(rc, prefix), limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := &lostReplyStore{Store: state.NewMemory(state.MemoryOptions{})}
	src := queue.NewMemory(queue.MemoryOptions{})
	a, err := New(cfg, Deps{Source: src, Store: storeOf(store), Limiter: lim, Runner: runnerFunc(failRun), InstanceID: "i-retry"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	defer func() {
		a.Drain("test", "end of test")
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	if _, err := src.Send(context.Background(), []byte(`{"id":"rf-1","host":"web-01","diagnostic":"check"}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the kept finish written again", func() bool { return store.finishes.Load() >= 2 && a.worker.Backlogged() == 0 })
	if n := store.calls.Load(); n != 1 {
		t.Errorf("the finishes carried %d limiter calls, want 1 (the first only)", n)
	}
	st, err := lim.Inspect(context.Background(), limiter.Request{Host: "web-01", Diagnostic: "check"})
	if err != nil || len(st) != 1 {
		t.Fatalf("Inspect: %+v %v", st, err)
	}
	if st[0].Failures != 1 || len(st[0].Holders) != 0 {
		t.Errorf("breaker counts %d failures, %d slots held; want 1 and 0", st[0].Failures, len(st[0].Holders))
	}
}
