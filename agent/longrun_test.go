package agent

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/supervisor"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// runnerFunc is a Runner in a function.
type runnerFunc func(ctx context.Context, d runner.Diagnostic, argv []string) runner.Result

func (f runnerFunc) Run(ctx context.Context, d runner.Diagnostic, argv []string) runner.Result {
	return f(ctx, d, argv)
}

// deadlineStore is a memory store that honours context deadlines the way
// a network store does: a call on an ended context fails.
type deadlineStore struct{ state.Store }

func (s deadlineStore) Claim(ctx context.Context, rec state.TaskRecord, owner string, lease time.Duration) (state.Claim, error) {
	if err := ctx.Err(); err != nil {
		return state.Claim{}, err
	}
	return s.Store.Claim(ctx, rec, owner, lease)
}

func (s deadlineStore) Renew(ctx context.Context, taskID, owner string, lease time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Renew(ctx, taskID, owner, lease)
}

func (s deadlineStore) Finish(ctx context.Context, rec state.TaskRecord, x state.FinishExtras) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Finish(ctx, rec, x)
}

func (s deadlineStore) Release(ctx context.Context, taskID, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Release(ctx, taskID, owner)
}

func (s deadlineStore) Audit(ctx context.Context, e state.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Store.Audit(ctx, e)
}

// TestRunLongerThanCallBoundsRecordsItsResult: a diagnostic that runs
// longer than any store or queue call bound (35 s here; worker.QueueCallTimeout
// is 30 s, redis.timeout 200 ms) still has its result recorded, its
// in-flight entry dropped and its message deleted: the bookkeeping after
// a run never uses a context created before it.
func TestRunLongerThanCallBoundsRecordsItsResult(t *testing.T) {
	t.Parallel()
	const runFor = worker.QueueCallTimeout + 5*time.Second
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Load([]byte(`
workers: 1
diagnostics:
  - {name: long, command: [/bin/true], timeout: 2m}
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
lifecycle: {drain_timeout: 5m}
`), nil)
		if err != nil {
			t.Fatal(err)
		}
		src := queue.NewMemory(queue.MemoryOptions{Visibility: cfg.Queue.VisibilityTimeout})
		store := deadlineStore{state.NewMemory(state.MemoryOptions{})}
		lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ran := 0
		slow := runnerFunc(func(ctx context.Context, _ runner.Diagnostic, _ []string) runner.Result {
			ran++
			select {
			case <-time.After(runFor):
			case <-ctx.Done():
				return runner.Result{Outcome: runner.Cancelled, ExitCode: -1}
			}
			return runner.Result{Outcome: outcome.Succeeded, Duration: runFor}
		})
		a, err := New(cfg, Deps{Source: src, Store: storeOf(store), Limiter: lim, Runner: slow, InstanceID: "i-long"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Run(context.Background()) }()
		if _, err := src.Send(context.Background(), []byte(`{"id":"long-1","host":"web-01","diagnostic":"long"}`)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(runFor + time.Second)
		synctest.Wait()
		a.Drain("test", "end of test")
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}

		ctx := context.Background()
		rec, ok, err := store.Task(ctx, "long-1")
		if err != nil || !ok {
			t.Fatalf("record: ok=%v err=%v", ok, err)
		}
		if ran != 1 || rec.Status != state.StatusDone || rec.Outcome != outcome.Succeeded {
			t.Fatalf("after %d run(s) the record is %+v, want done and succeeded", ran, rec)
		}
		if inflight, err := store.Inflight(ctx, "i-long"); err != nil || len(inflight) != 0 {
			t.Fatalf("in-flight entries = %v (%v), want none", inflight, err)
		}
		if ready, held := src.Len(); ready != 0 || held != 0 {
			t.Fatalf("queue holds %d ready and %d in-flight messages, want it deleted", ready, held)
		}
		if got := a.Status().Outcomes[outcome.Succeeded]; got != 1 {
			t.Fatalf("succeeded = %d, want 1", got)
		}
	})
}

// TestRunWaitsForItsHandlers: on a fast exit, a diagnostic that takes
// longer than supervisor.ReleaseGrace to stop still has its handler waited for: Run
// returns after the handler recorded the release, so nothing main closes
// after Run (the queue, the Redis client) is closed under it.
func TestRunWaitsForItsHandlers(t *testing.T) {
	t.Parallel()
	const stopping = supervisor.ReleaseGrace + 5*time.Second
	synctest.Test(t, func(t *testing.T) {
		cfg, err := config.Load([]byte(`
diagnostics:
  - {name: stubborn, command: [/bin/true], timeout: 2m}
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
lifecycle: {drain_timeout: 5m}
`), nil)
		if err != nil {
			t.Fatal(err)
		}
		src := queue.NewMemory(queue.MemoryOptions{Visibility: cfg.Queue.VisibilityTimeout})
		store := deadlineStore{state.NewMemory(state.MemoryOptions{})}
		lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		var returned bool
		stubborn := runnerFunc(func(ctx context.Context, _ runner.Diagnostic, _ []string) runner.Result {
			close(started)
			<-ctx.Done()
			time.Sleep(stopping)
			returned = true
			return runner.Result{Outcome: runner.Cancelled, ExitCode: -1}
		})
		a, err := New(cfg, Deps{Source: src, Store: storeOf(store), Limiter: lim, Runner: stubborn, InstanceID: "i-stubborn"})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		if _, err := src.Send(context.Background(), []byte(`{"id":"s-1","host":"web-01","diagnostic":"stubborn"}`)); err != nil {
			t.Fatal(err)
		}
		<-started
		cancel()
		if err := <-done; !errors.Is(err, supervisor.ErrFastExit) {
			t.Fatalf("Run = %v, want ErrFastExit", err)
		}
		if !returned {
			t.Fatal("Run returned while a handler's diagnostic was still stopping")
		}
		if got := a.Status().Outcomes[outcome.Released]; got != 1 {
			t.Fatalf("released = %d, want 1", got)
		}
	})
}
