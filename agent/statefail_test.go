package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/state/statetest"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

var errStoreDown = errors.New("state store down (test)")

// flakyStore is a memory store whose task, audit and mark calls fail
// while down is set, as Redis does when it is unreachable.
type flakyStore struct {
	state.Store
	down atomic.Bool
}

// storeOf is the Store a lab's agent gets: s itself when it is one (a
// fleet's keeps its hand-off), else a Store whose every role is s.
func storeOf(s statetest.Roles) state.Store {
	if st, ok := s.(state.Store); ok {
		return st
	}
	return statetest.Store(s)
}

func (s *flakyStore) fail() error {
	if s.down.Load() {
		return errStoreDown
	}
	return nil
}

func (s *flakyStore) Claim(ctx context.Context, rec state.TaskRecord, owner string, lease time.Duration) (state.Claim, error) {
	if err := s.fail(); err != nil {
		return state.Claim{}, err
	}
	return s.Store.Claim(ctx, rec, owner, lease)
}

func (s *flakyStore) Renew(ctx context.Context, taskID, owner string, lease time.Duration) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Renew(ctx, taskID, owner, lease)
}

func (s *flakyStore) Finish(ctx context.Context, rec state.TaskRecord, x state.FinishExtras) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Finish(ctx, rec, x)
}

func (s *flakyStore) Release(ctx context.Context, taskID, owner string) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Release(ctx, taskID, owner)
}

func (s *flakyStore) Audit(ctx context.Context, e state.AuditEntry) error {
	if err := s.fail(); err != nil {
		return err
	}
	return s.Store.Audit(ctx, e)
}

func (s *flakyStore) MarkOnce(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if err := s.fail(); err != nil {
		return false, err
	}
	return s.Store.MarkOnce(ctx, key, ttl)
}

// faultyDLQ is a memory queue whose first failDLQ dead-letter sends fail.
type faultyDLQ struct {
	*queue.Memory
	failDLQ  atomic.Int32
	attempts atomic.Int32
}

func (q *faultyDLQ) DeadLetter(ctx context.Context, m *queue.Message, reason string) error {
	q.attempts.Add(1)
	if q.failDLQ.Add(-1) >= 0 {
		return errors.New("dead-letter queue refused the message (test)")
	}
	return q.Memory.DeadLetter(ctx, m, reason)
}

// pipelineLab is an agent on a memory queue, a store and a counting
// runner, run inside a synctest bubble.
type pipelineLab struct {
	a       *Agent
	src     queue.Source
	ran     func() int
	done    chan error
	stopped bool
}

func startLab(t *testing.T, yaml string, src queue.Source, store statetest.Roles) *pipelineLab {
	t.Helper()
	cfg, err := config.Load([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := 0
	count := runnerFunc(func(context.Context, runner.Diagnostic, []string) runner.Result {
		mu.Lock()
		runs++
		mu.Unlock()
		return runner.Result{Outcome: outcome.Succeeded, Duration: time.Millisecond}
	})
	a, err := New(cfg, Deps{Source: src, Store: storeOf(store), Limiter: lim, Runner: count, InstanceID: "i-lab"})
	if err != nil {
		t.Fatal(err)
	}
	l := &pipelineLab{a: a, src: src, done: make(chan error, 1), ran: func() int {
		mu.Lock()
		defer mu.Unlock()
		return runs
	}}
	go func() { l.done <- a.Run(context.Background()) }()
	// A test that fails early still ends its agent, so the bubble ends.
	t.Cleanup(func() { l.stop(t) })
	return l
}

// stop drains the agent and waits for Run, once.
func (l *pipelineLab) stop(t *testing.T) {
	t.Helper()
	if l.stopped {
		return
	}
	l.stopped = true
	l.a.Drain("test", "end of test")
	if err := <-l.done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func (l *pipelineLab) degraded(op string) float64 {
	return testutil.ToFloat64(l.a.m.stateDegraded.WithLabelValues(op))
}

const labConfig = `
workers: 1
redis: {state_fail: %s}
diagnostics:
  - {name: echo, command: [/bin/true], timeout: 10s}
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
lifecycle: {drain_timeout: 1m}
`

// TestStateFailOpenRunsAndWritesLater: with the store unreachable and
// redis.state_fail open, a task runs anyway (no lease), the degraded
// claim and finish are counted, and its record is written once the store
// answers again.
func TestStateFailOpenRunsAndWritesLater(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		src := queue.NewMemory(queue.MemoryOptions{})
		store := &flakyStore{Store: state.NewMemory(state.MemoryOptions{})}
		store.down.Store(true)
		l := startLab(t, strings.Replace(labConfig, "%s", config.StateFailOpen, 1), src, store)
		if _, err := src.Send(context.Background(), []byte(`{"id":"open-1","host":"web-01","diagnostic":"echo"}`)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if l.ran() != 1 || l.a.Status().Outcomes[outcome.Succeeded] != 1 {
			t.Fatalf("ran %d, outcomes %v; want the task run and succeeded during the outage", l.ran(), l.a.Status().Outcomes)
		}
		if c, f := l.degraded("claim"), l.degraded("finish"); c != 1 || f != 1 {
			t.Fatalf("degraded claim %v finish %v, want 1 and 1", c, f)
		}
		if _, ok, _ := store.Task(context.Background(), "open-1"); ok {
			t.Fatal("a record was written while the store was down")
		}
		if n := l.a.worker.Backlogged(); n != 1 {
			t.Fatalf("backlog holds %d records, want 1", n)
		}
		if ready, held := src.Len(); ready+held != 0 {
			t.Fatalf("queue holds %d ready and %d in-flight messages, want the message deleted", ready, held)
		}

		store.down.Store(false)
		// The flush loop's longest pause.
		time.Sleep(worker.BacklogRetryMax)
		synctest.Wait()
		rec, ok, err := store.Task(context.Background(), "open-1")
		if err != nil || !ok || rec.Status != state.StatusDone || rec.Outcome != outcome.Succeeded || rec.Owner != "i-lab" {
			t.Fatalf("record after the store came back = %+v ok=%v err=%v, want done and succeeded", rec, ok, err)
		}
		if n := l.a.worker.Backlogged(); n != 0 {
			t.Fatalf("backlog holds %d records after the flush, want 0", n)
		}
		l.stop(t)
	})
}

// TestStateFailClosedHandsBack: with redis.state_fail closed the task
// does not run while the store is unreachable: the message is handed
// back with backoff and runs once the store answers.
func TestStateFailClosedHandsBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		src := queue.NewMemory(queue.MemoryOptions{})
		store := &flakyStore{Store: state.NewMemory(state.MemoryOptions{})}
		store.down.Store(true)
		l := startLab(t, strings.Replace(labConfig, "%s", config.StateFailClosed, 1), src, store)
		if _, err := src.Send(context.Background(), []byte(`{"id":"closed-1","host":"web-01","diagnostic":"echo"}`)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if l.ran() != 0 || l.a.Status().Outcomes[outcome.Released] != 1 || l.degraded("claim") != 1 {
			t.Fatalf("ran %d, outcomes %v, degraded claim %v; want no run, one release, one degraded claim",
				l.ran(), l.a.Status().Outcomes, l.degraded("claim"))
		}
		if ready, held := src.Len(); ready != 0 || held != 1 {
			t.Fatalf("queue: %d ready, %d hidden; want the message hidden for its backoff", ready, held)
		}
		store.down.Store(false)
		time.Sleep(worker.RetryBase)
		synctest.Wait()
		if l.ran() != 1 || l.a.Status().Outcomes[outcome.Succeeded] != 1 {
			t.Fatalf("after the store came back: ran %d, outcomes %v; want one run", l.ran(), l.a.Status().Outcomes)
		}
		l.stop(t)
	})
}

// TestRejectedMessageOneOutcome: a rejected message whose dead-letter
// copy fails comes back, after a backoff, until the copy succeeds; it is
// counted rejected once, audited once, and dead-lettered once.
func TestRejectedMessageOneOutcome(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		src := &faultyDLQ{Memory: queue.NewMemory(queue.MemoryOptions{})}
		src.failDLQ.Store(3)
		store := state.NewMemory(state.MemoryOptions{})
		l := startLab(t, strings.Replace(labConfig, "%s", config.StateFailOpen, 1), src, store)
		if _, err := src.Send(context.Background(), []byte(`{"id":"bad-1","host":"169.254.169.254!","diagnostic":"echo"}`)); err != nil {
			t.Fatal(err)
		}
		// Three failures back off by at most worker.RetryBase·(1+2+4).
		for range 4 {
			time.Sleep(worker.RetryBase << 2)
			synctest.Wait()
		}
		if got := src.attempts.Load(); got != 4 {
			t.Fatalf("dead-letter attempts = %d, want 4 (three failures, then the copy)", got)
		}
		if dl := src.DeadLetters(); len(dl) != 1 {
			t.Fatalf("dead letters = %d, want 1", len(dl))
		}
		if got := l.a.Status().Outcomes[outcome.Rejected]; got != 1 {
			t.Fatalf("rejected = %d, want 1 however often the message came back", got)
		}
		audit, _ := store.RecentAudit(context.Background(), 10)
		if len(audit) != 1 || audit[0].Outcome != outcome.Rejected {
			t.Fatalf("audit = %+v, want one rejected entry", audit)
		}
		if got := l.a.worker.InFlight(); got != 0 {
			t.Fatalf("in flight = %d, want 0", got)
		}
		l.stop(t)
	})
}

// TestRejectedMessageStoreDown: when the mark cannot be read the reject
// is counted (again rather than never) and the degraded mark counted.
func TestRejectedMessageStoreDown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		src := queue.NewMemory(queue.MemoryOptions{})
		store := &flakyStore{Store: state.NewMemory(state.MemoryOptions{})}
		store.down.Store(true)
		l := startLab(t, strings.Replace(labConfig, "%s", config.StateFailOpen, 1), src, store)
		if _, err := src.Send(context.Background(), []byte(`{"id":"bad-2","host":"no such host","diagnostic":"echo"}`)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := l.a.Status().Outcomes[outcome.Rejected]; got != 1 || l.degraded("mark") != 1 || len(src.DeadLetters()) != 1 {
			t.Fatalf("rejected %d, degraded mark %v, dead letters %d; want 1, 1, 1", got, l.degraded("mark"), len(src.DeadLetters()))
		}
		l.stop(t)
	})
}
