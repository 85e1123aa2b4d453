package agent

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// stallingStore stops the agent right after its claim for longer than the
// lease, as a SIGSTOP would, during which another agent claims the task.
type stallingStore struct {
	deadlineStore
	stall time.Duration
}

func (s stallingStore) Claim(ctx context.Context, rec state.TaskRecord, owner string, lease time.Duration) (state.Claim, error) {
	c, err := s.deadlineStore.Claim(ctx, rec, owner, lease)
	if err != nil || c.Result != state.Claimed {
		return c, err
	}
	time.Sleep(s.stall)
	if other, err := s.Store.Claim(ctx, rec, "i-other", lease); err != nil || other.Result != state.Claimed {
		panic("the other agent could not claim the lapsed lease")
	}
	return c, nil
}

// TestLeaseLostBeforeStartDoesNotRun: an agent stopped between its claim
// and the diagnostic's start for longer than the lease finds, before it
// starts, that another agent took the lease, and does not run the task a
// second time; the message is handed back for the holder to finish.
func TestLeaseLostBeforeStartDoesNotRun(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Load([]byte(`
workers: 1
diagnostics:
  - {name: quick, command: [/bin/true], timeout: 10s}
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
queue: {visibility_timeout: 30s}
lifecycle: {drain_timeout: 1m}
`), nil)
		if err != nil {
			t.Fatal(err)
		}
		src := queue.NewMemory(queue.MemoryOptions{Visibility: cfg.Queue.VisibilityTimeout})
		mem := state.NewMemory(state.MemoryOptions{})
		store := stallingStore{deadlineStore{mem}, cfg.Queue.VisibilityTimeout + time.Second}
		lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		count := runnerFunc(func(context.Context, runner.Diagnostic, []string) runner.Result {
			ran++
			return runner.Result{Outcome: outcome.Succeeded}
		})
		a, err := New(cfg, Deps{Source: src, Store: storeOf(store), Limiter: lim, Runner: count, InstanceID: "i-stopped"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Run(context.Background()) }()
		if _, err := src.Send(context.Background(), []byte(`{"id":"st-1","host":"web-01","diagnostic":"quick"}`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(store.stall + time.Second)
		synctest.Wait()
		a.Drain("test", "end of test")
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		if ran != 0 {
			t.Fatalf("the diagnostic ran %d time(s) on the agent whose lease lapsed before the start, want 0", ran)
		}
		rec, ok, err := mem.Task(context.Background(), "st-1")
		if err != nil || !ok || rec.Owner != "i-other" || rec.Status != state.StatusRunning {
			t.Fatalf("record %+v (ok=%v, %v), want running under i-other", rec, ok, err)
		}
		if got := a.Status().Outcomes[outcome.Succeeded]; got != 0 {
			t.Fatalf("succeeded = %d, want 0", got)
		}
	})
}
