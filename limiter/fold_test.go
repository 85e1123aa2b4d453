package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// TestRedisFold: a folded decision, run as the caller's script would run
// it (allow.lua's source with Keys and Args) and resolved, is the decision
// Allow makes and writes the same state: the cap of 1 taken by t1 denies
// t2 through Allow, and t2 folded, and the same task again keeps its
// slot. Fold declines what Allow must decide: a memory backend, a rule
// without limits, a Redis-outage breaker that is not closed.
func TestRedisFold(t *testing.T) {
	c := testRedisDirect(t)
	prefix := uniquePrefix(t)
	cfg := rules(Rule{Name: "cap", Key: KeyHost, Match: Match{Diagnostic: []string{"d"}}, Limits: []Limit{{Concurrency: Concurrency{Max: 1}}}},
		Rule{Name: "free", Key: KeyHost})
	l, err := New(cfg, NewRedis(c, prefix), Options{Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := func(task, diag string) Request {
		return Request{Host: "h1", Diagnostic: diag, TaskID: task, Lease: time.Minute}
	}
	folded := func(r Request) Decision {
		t.Helper()
		f, ok := l.Fold(r)
		if !ok {
			t.Fatalf("Fold %s: not folded", r.TaskID)
		}
		reply, err := redis.NewScript(f.Source).Run(ctx, c, f.Keys, f.Args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		d, err := f.Resolve(ctx, reply)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := folded(req("t1", "d")); !d.Allowed || d.Counters.Running != 1 {
		t.Fatalf("folded t1 = %+v, want allowed holding the one slot", d)
	}
	if d, err := l.Allow(ctx, req("t2", "d")); err != nil || d.Allowed || d.Reason != ReasonConcurrency {
		t.Fatalf("Allow t2 after folded t1 = %+v, %v; want denied by concurrency", d, err)
	}
	if d := folded(req("t2", "d")); d.Allowed || d.Reason != ReasonConcurrency || d.Counters.Running != 1 {
		t.Fatalf("folded t2 = %+v, want denied by concurrency, 1 running", d)
	}
	if d := folded(req("t1", "d")); !d.Allowed {
		t.Fatalf("folded t1 again = %+v, want allowed (its slot)", d)
	}
	if _, ok := l.Fold(req("t3", "other")); ok {
		t.Error("Fold of a task whose rule has no limits: folded, want Allow to decide without Redis")
	}
	if _, err := f2(l).Resolve(ctx, 42); err == nil {
		t.Error("Resolve of a reply that is not allow.lua's: no error")
	}
	for range l.breaker.threshold {
		l.breaker.failure(t0)
	}
	if _, ok := l.Fold(req("t4", "d")); ok {
		t.Error("Fold with the Redis-outage breaker open: folded, want Allow (the fail mode) to decide")
	}
	m, err := New(cfg, NewMemory(), Options{Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Fold(req("t1", "d")); ok {
		t.Error("Fold of a memory backend: folded, want false")
	}
}

func f2(l *Limiter) *Folded {
	f, _ := l.Fold(Request{Host: "h1", Diagnostic: "d", TaskID: "x", Lease: time.Minute})
	return f
}
