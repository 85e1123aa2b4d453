package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/state/statetest"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/internal/testenv"
	"github.com/autodiag/autodiag/limiter"
)

// endLabConfig has a sink and reports for failed tasks, so a failed task
// ends with a record, an audit entry, an outbox event and a report job.
const endLabConfig = `
workers: 1
queue: {visibility_timeout: 1m}
diagnostics:
  - {name: check, command: [/bin/false], timeout: 10s}
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
notify:
  - {name: hook, type: webhook, url: "http://127.0.0.1:1/hook", allow_http: true, on: [failed]}
report: {enabled: true, provider: bedrock, model: m, on: [failed]}
lifecycle: {drain_timeout: 1m}
`

// heldProvider answers no report until the test ends, so a queued job
// stays where the test can count it.
type heldProvider struct{ release chan struct{} }

func (heldProvider) Name() string { return "bedrock" }
func (p heldProvider) Complete(ctx context.Context, _ report.Request) (report.Response, error) {
	select {
	case <-p.release:
	case <-ctx.Done():
	}
	return report.Response{}, errors.New("held")
}

// countingOutbox and countingQueue count what is written to them, however
// it gets there.
type countingOutbox struct {
	notify.Outbox
	n atomic.Int64
}

func (o *countingOutbox) Enqueue(ctx context.Context, e []notify.Entry) ([]string, error) {
	o.n.Add(int64(len(e)))
	return o.Outbox.Enqueue(ctx, e)
}

type countingQueue struct {
	report.Queue
	n atomic.Int64
}

func (q *countingQueue) Enqueue(ctx context.Context, j report.Job) error {
	q.n.Add(1)
	return q.Queue.Enqueue(ctx, j)
}

// endLab is an agent of endLabConfig whose diagnostic is run.
func endLab(t *testing.T, store statetest.Roles, ob notify.Outbox, q report.Queue, run runnerFunc) (*Agent, *queue.Memory, func()) {
	t.Helper()
	return endLabWith(t, endLabConfig, store, ob, q, run)
}

// endLabWith is endLab with the config yaml.
func endLabWith(t *testing.T, yaml string, store statetest.Roles, ob notify.Outbox, q report.Queue, run runnerFunc) (*Agent, *queue.Memory, func()) {
	t.Helper()
	cfg, err := config.Load([]byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	src := queue.NewMemory(queue.MemoryOptions{})
	a, err := New(cfg, Deps{Source: src, Store: storeOf(store), Limiter: lim, Runner: run, InstanceID: "i-end", Outbox: ob,
		Reports: &hooks.ReportParts{Provider: heldProvider{release: hold}, Queue: q, Backend: limiter.NewMemory()}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(hold)
			a.Drain("test", "end of test")
			if err := <-done; err != nil {
				t.Errorf("Run = %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return a, src, stop
}

func failRun(context.Context, runner.Diagnostic, []string) runner.Result {
	return runner.Result{Outcome: outcome.Failed, ExitCode: 1, Output: []byte("boom"), Duration: time.Millisecond}
}

// finishProbe marks the context of each Finish so that the client's hook
// counts its round trips, and right after it returns reads how many
// entries the audit, outbox and report streams ever got.
type finishProbe struct {
	state.Store
	peek  *redis.Client
	keys  []string // audit, outbox, report jobs
	mu    sync.Mutex
	trips []int64   // per Finish
	added [][]int64 // per Finish, per key
}

type finishCtxKey struct{}

func (p *finishProbe) Finish(ctx context.Context, rec state.TaskRecord, x state.FinishExtras) error {
	n := new(atomic.Int64)
	err := p.Store.Finish(context.WithValue(ctx, finishCtxKey{}, n), rec, x)
	var added []int64
	for _, k := range p.keys {
		info, ierr := p.peek.XInfoStream(ctx, k).Result()
		if ierr != nil {
			added = append(added, 0)
			continue
		}
		added = append(added, info.EntriesAdded)
	}
	p.mu.Lock()
	p.trips = append(p.trips, n.Load())
	p.added = append(p.added, added)
	p.mu.Unlock()
	return err
}

// finishTrips counts, on the counter in a Finish's context, the round trips
// testenv.CallersTrip counts.
type finishTrips struct{}

func (finishTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (finishTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n, ok := ctx.Value(finishCtxKey{}).(*atomic.Int64); ok && testenv.CallersTrip(cmd) {
			n.Add(1)
		}
		return err
	}
}
func (finishTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if n, ok := ctx.Value(finishCtxKey{}).(*atomic.Int64); ok && testenv.CallersTrip(cmds...) {
			n.Add(1)
		}
		return err
	}
}

// TestTaskEndOneRoundTrip: on a real redis-server, a failed task's end —
// its record, audit entry, outbox event and report job — is one round
// trip, all written when Finish returns.
func TestTaskEndOneRoundTrip(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rc.Close() })
	rc.AddHook(finishTrips{})
	peek := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = peek.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "autodiag-test:end:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		keys, _ := peek.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			peek.Del(context.Background(), keys...)
		}
	})
	probe := &finishProbe{Store: state.NewRedis(rc, state.RedisOptions{Prefix: prefix}), peek: peek,
		keys: []string{prefix + "audit", prefix + "{notify}:outbox:hook", prefix + "{report}:jobs"}}
	a, src, stop := endLab(t, probe, notify.NewRedisOutbox(rc, notify.RedisOptions{Prefix: prefix}),
		report.NewRedisQueue(rc, prefix, 0), failRun)
	// The first task loads the script (EVALSHA, then EVAL); the second is
	// the steady state.
	for i := 1; i <= 2; i++ {
		if _, err := src.Send(context.Background(), []byte(fmt.Sprintf(`{"id":"end-%d","host":"web-01","diagnostic":"check"}`, i))); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the task's end", func() bool { return a.Status().Outcomes[outcome.Failed] == int64(i) })
	}
	stop()
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if len(probe.trips) != 2 {
		t.Fatalf("Finish called %d times, want 2", len(probe.trips))
	}
	if n := probe.trips[1]; n != 1 {
		t.Errorf("the task's end took %d round trips, want 1", n)
	}
	if got := probe.added[1]; got[0] != 2 || got[1] != 2 || got[2] != 2 {
		t.Errorf("when Finish returned, audit, outbox and report streams had %v entries added, want 2 each", got)
	}
}

// TestSupersededEndWritesNoEventOrReport: a run whose lease lapsed while
// it ran and whose task another agent claimed ends in its own outcome and
// audit entry, but writes no outbox event and no report job: the later
// attempt owns them. Memory and Redis stores alike.
func TestSupersededEndWritesNoEventOrReport(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T, c clock.Clock) state.Store{
		"memory": func(_ *testing.T, c clock.Clock) state.Store { return state.NewMemory(state.MemoryOptions{Clock: c}) },
		"redis": func(t *testing.T, c clock.Clock) state.Store {
			rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
			t.Cleanup(func() { _ = rc.Close() })
			var b [4]byte
			_, _ = rand.Read(b[:])
			prefix := "autodiag-test:superseded:" + hex.EncodeToString(b[:]) + ":"
			t.Cleanup(func() {
				keys, _ := rc.Keys(context.Background(), prefix+"*").Result()
				if len(keys) > 0 {
					rc.Del(context.Background(), keys...)
				}
			})
			return state.NewRedis(rc, state.RedisOptions{Prefix: prefix, Clock: c})
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			clock := clock.NewManual(time.Now().Truncate(time.Millisecond))
			store := open(t, clock)
			ob := &countingOutbox{Outbox: notify.NewMemoryOutbox(notify.MemoryOptions{})}
			q := &countingQueue{Queue: report.NewMemoryQueue(0, nil)}
			// While the diagnostic runs its lease lapses and another
			// agent claims the task.
			takeover := runnerFunc(func(ctx context.Context, d runner.Diagnostic, argv []string) runner.Result {
				clock.Add(2 * time.Minute)
				if cl, err := store.Claim(ctx, state.TaskRecord{ID: "sup-1"}, "i-other", time.Minute); err != nil || cl.Result != state.Claimed {
					t.Errorf("takeover claim = %+v, %v", cl.Result, err)
				}
				return failRun(ctx, d, argv)
			})
			a, src, stop := endLab(t, store, ob, q, takeover)
			if _, err := src.Send(context.Background(), []byte(`{"id":"sup-1","host":"web-01","diagnostic":"check"}`)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the task's end", func() bool { return a.Status().Outcomes[outcome.Failed] == 1 })
			stop()
			if n := ob.n.Load(); n != 0 {
				t.Errorf("outbox entries written = %d, want none for a superseded run", n)
			}
			if n := q.n.Load(); n != 0 {
				t.Errorf("report jobs queued = %d, want none for a superseded run", n)
			}
			entries, err := store.RecentAudit(context.Background(), 10)
			if err != nil || len(entries) != 1 || entries[0].Outcome != outcome.Failed || entries[0].TaskID != "sup-1" {
				t.Errorf("audit = %+v, %v; want this run's failed entry", entries, err)
			}
			if rec, _, _ := store.Task(context.Background(), "sup-1"); rec.Owner != "i-other" || rec.Status != state.StatusRunning {
				t.Errorf("record = %+v, want the later attempt's, running", rec)
			}
		})
	}
}

// TestBacklogReplayWritesExtrasOnce: a task that ends while the store is
// down is kept with its audit entry, outbox event and report job; when
// the store answers again they are written once, with the record.
func TestBacklogReplayWritesExtrasOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		store := &flakyStore{Store: state.NewMemory(state.MemoryOptions{})}
		ob := &countingOutbox{Outbox: notify.NewMemoryOutbox(notify.MemoryOptions{})}
		q := &countingQueue{Queue: report.NewMemoryQueue(0, nil)}
		cfg := strings.Replace(endLabConfig, "queue: {visibility_timeout: 1m}", "queue: {visibility_timeout: 1m}\nredis: {state_fail: open}", 1)
		store.down.Store(true)
		a, src, stop := endLabWith(t, cfg, store, ob, q, failRun)
		if _, err := src.Send(context.Background(), []byte(`{"id":"bl-1","host":"web-01","diagnostic":"check"}`)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if a.Status().Outcomes[outcome.Failed] != 1 || a.worker.Backlogged() != 1 {
			t.Fatalf("outcomes %v, backlog %d; want the task failed and its record kept", a.Status().Outcomes, a.worker.Backlogged())
		}
		if o, j := ob.n.Load(), q.n.Load(); o != 0 || j != 0 {
			t.Fatalf("while the store is down: %d outbox entries, %d report jobs written; want them kept with the record", o, j)
		}
		store.down.Store(false)
		time.Sleep(worker.BacklogRetryMax) // the flush loop's longest pause
		synctest.Wait()
		if n := a.worker.Backlogged(); n != 0 {
			t.Fatalf("backlog holds %d after the store came back", n)
		}
		if o, j := ob.n.Load(), q.n.Load(); o != 1 || j != 1 {
			t.Errorf("after the replay: %d outbox entries, %d report jobs; want 1 each", o, j)
		}
		entries, err := store.RecentAudit(context.Background(), 10)
		if err != nil || len(entries) != 1 || entries[0].TaskID != "bl-1" || entries[0].Outcome != outcome.Failed {
			t.Errorf("audit = %+v, %v; want the task's failed entry once", entries, err)
		}
		stop()
	})
}
