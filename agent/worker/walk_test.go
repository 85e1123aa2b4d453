package worker

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// walkLog records each collaborator call of one task's walk as
// "package.Method", in the order made.
type walkLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *walkLog) add(call string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, call)
}

// packages is the walk as the packages it enters, one entry per visit:
// consecutive calls into one package are one visit.
func (l *walkLog) packages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.calls {
		pkg, _, _ := strings.Cut(c, ".")
		if len(out) == 0 || out[len(out)-1] != pkg {
			out = append(out, pkg)
		}
	}
	return out
}

// walkSource is a queue with one message: its first receive brings it,
// later ones wait for the intake's end; the delete ends the intake.
type walkSource struct {
	queue.Source
	log     *walkLog
	once    sync.Once
	deleted context.CancelFunc
}

func (s *walkSource) Receive(ctx context.Context, _ int) ([]*queue.Message, error) {
	var msgs []*queue.Message
	s.once.Do(func() {
		msgs = []*queue.Message{{ID: "m1", Handle: "rh-1", ReceiveCount: 1, Body: []byte(`{"id":"t1","host":"web-1","diagnostic":"df"}`)}}
	})
	if msgs != nil {
		s.log.add("queue.Receive")
		return msgs, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *walkSource) Hold(*queue.Message) func() { s.log.add("queue.Hold"); return func() {} }

func (s *walkSource) Delete(context.Context, *queue.Message) error {
	s.log.add("queue.Delete")
	s.deleted()
	return nil
}

type walkValidator struct{ log *walkLog }

func (v walkValidator) Validate(*task.Task, time.Time) error { v.log.add("task.Validate"); return nil }

type walkStore struct {
	Store
	log *walkLog
}

func (s walkStore) Claim(ctx context.Context, rec state.TaskRecord, owner string, lease time.Duration) (state.Claim, error) {
	s.log.add("state.Claim")
	return s.Store.Claim(ctx, rec, owner, lease)
}

func (s walkStore) Finish(ctx context.Context, rec state.TaskRecord, x state.FinishExtras) error {
	s.log.add("state.Finish")
	return s.Store.Finish(ctx, rec, x)
}

type walkLimiter struct{ log *walkLog }

func (l walkLimiter) Allow(context.Context, limiter.Request) (limiter.Decision, error) {
	l.log.add("limiter.Allow")
	return limiter.Decision{Allowed: true, Rule: "r"}, nil
}

func (l walkLimiter) Renew(context.Context, limiter.Request, time.Duration) error {
	l.log.add("limiter.Renew")
	return nil
}

func (l walkLimiter) Done(context.Context, limiter.Request, string) error {
	l.log.add("limiter.Done")
	return nil
}

func (l walkLimiter) Fold(limiter.Request) (*limiter.Folded, bool) {
	l.log.add("limiter.Fold")
	return nil, false
}

func (l walkLimiter) DoneCalls(limiter.Request, string) ([]limiter.ScriptCall, bool) {
	l.log.add("limiter.DoneCalls")
	return nil, false
}

type walkRunner struct{ log *walkLog }

func (r walkRunner) Run(context.Context, runner.Diagnostic, []string) runner.Result {
	r.log.add("runner.Run")
	return runner.Result{Outcome: outcome.Succeeded, Output: []byte("ok\n")}
}

type walkHooks struct{ log *walkLog }

func (h walkHooks) Keep(*state.TaskRecord, *runner.Result, runner.Diagnostic) {
	h.log.add("hooks.Keep")
}

func (h walkHooks) Writes(state.TaskRecord, runner.Diagnostic, *runner.Result) []state.Write {
	h.log.add("hooks.Writes")
	return nil
}

// TestTaskWalk: one task that runs anywhere, received and run to its
// delete, enters each collaborator in the order of its life, and only the
// limiter and the state store more than once: the limiter folds its
// decision around the claim (Fold before it, the decision after it) and
// takes the run's slots back after the run, and the store is entered for
// the claim and for the finish. The queue is entered at the receive (the
// receive and the hold) and at the delete; the hooks for the output's keep
// and the end's writes, with no other collaborator between them.
func TestTaskWalk(t *testing.T) {
	log := &walkLog{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	src := &walkSource{log: log, deleted: cancel}
	catalog := map[string]runner.Diagnostic{"df": {Name: "df", Command: []string{"/usr/bin/df"}, RunsOn: runner.RunsOnAny}}
	w, _ := testWorker(t, Options{Source: src, Store: walkStore{Store: state.NewMemory(state.MemoryOptions{}), log: log},
		Limiter: walkLimiter{log}, Runner: walkRunner{log}, Validator: walkValidator{log}, Hooks: walkHooks{log},
		Catalog: catalog, Drain: drain.New(drain.Config{}), Clock: clock.Wall{}, Lease: 30 * time.Second, InstanceID: "i-me",
		Placement: Placement{Names: []string{"me.example"}}})
	w.Receive(ctx)
	w.Wait()
	if got := w.Outcomes()[outcome.Succeeded]; got != 1 {
		t.Fatalf("outcomes %v, want the task succeeded once (calls %v)", w.Outcomes(), log.calls)
	}
	want := []string{"queue", "task", "limiter", "state", "limiter", "runner", "limiter", "hooks", "state", "queue"}
	if got := log.packages(); !slices.Equal(got, want) {
		t.Errorf("the task's walk entered\n  %v\nwant\n  %v\n(calls %v)", got, want, log.calls)
	}
}

// dedupeLimiter allows every run and records the dedupe key of each
// decision asked for.
type dedupeLimiter struct {
	walkLimiter
	mu   sync.Mutex
	keys []string
}

func (l *dedupeLimiter) Allow(_ context.Context, r limiter.Request) (limiter.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, r.DedupeKey)
	return limiter.Decision{Allowed: true, Rule: "r"}, nil
}

// TestDedupeKeyOfCanonicalHost: the limiter's dedupe key is the task's
// field as the task runs here: with limiter.dedupe.key host, a target
// task sent under another of this agent's names is deduplicated under
// the canonical name that its record and quota use.
func TestDedupeKeyOfCanonicalHost(t *testing.T) {
	log := &walkLog{}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	src := &walkSource{log: log, deleted: cancel}
	lim := &dedupeLimiter{walkLimiter: walkLimiter{log}}
	catalog := map[string]runner.Diagnostic{"df": {Name: "df", Command: []string{"/usr/bin/df"}, RunsOn: runner.RunsOnTarget}}
	w, _ := testWorker(t, Options{Source: src, Store: state.NewMemory(state.MemoryOptions{}), Limiter: lim, Runner: walkRunner{log},
		Validator: walkValidator{log}, Hooks: walkHooks{log}, Catalog: catalog, Drain: drain.New(drain.Config{}), Clock: clock.Wall{},
		Lease: 30 * time.Second, InstanceID: "i-me", DedupeKey: "host",
		Placement: Placement{Names: []string{"me.example", "web-1"}}})
	w.Receive(ctx)
	w.Wait()
	if got := w.Outcomes()[outcome.Succeeded]; got != 1 {
		t.Fatalf("outcomes %v, want the task succeeded once", w.Outcomes())
	}
	if !slices.Equal(lim.keys, []string{"me.example"}) {
		t.Errorf("dedupe keys %q, want the canonical name [me.example]", lim.keys)
	}
}
