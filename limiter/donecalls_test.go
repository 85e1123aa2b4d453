package limiter

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestRedisDoneCalls: DoneCalls are Done's held.lua call, for a caller to
// send in a round trip of its own: sent once, they give the slot back and
// count the failed run once for the breaker, with the commands Done runs;
// a memory backend has none (ok false).
func TestRedisDoneCalls(t *testing.T) {
	c := testRedisDirect(t)
	addr := c.Options().Addr
	prefix := uniquePrefix(t)
	cfg := rules(Rule{Name: "cap", Key: KeyHost, Limits: []Limit{{Concurrency: Concurrency{Max: 1}}},
		Breaker: &Breaker{Failures: 3, Window: time.Hour, OpenFor: time.Hour}})
	l, err := New(cfg, NewRedis(c, prefix), Options{Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := func(task string) Request {
		return Request{Host: "h1", Diagnostic: "d", TaskID: task, Lease: time.Minute}
	}
	for _, task := range []string{"t1", "t2"} {
		if d, err := l.Allow(ctx, req("t1")); err != nil || !d.Allowed {
			t.Fatalf("Allow %s: %+v %v", task, d, err)
		}
		end := prefix + "end"
		send := func() {
			calls, ok := l.DoneCalls(req("t1"), OutcomeFailed)
			if !ok || len(calls) != 1 {
				t.Fatalf("DoneCalls: %d calls, ok %v; want 1, true", len(calls), ok)
			}
			for _, sc := range calls {
				if err := sc.Script.Run(ctx, c, sc.Keys, sc.Args...).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		done := func() {
			if err := l.Done(ctx, req("t1"), OutcomeFailed); err != nil {
				t.Fatal(err)
			}
		}
		echo := func() {
			if err := c.Echo(ctx, end).Err(); err != nil {
				t.Fatal(err)
			}
		}
		fn := send
		if task == "t2" {
			fn = done
		}
		got := testenv.Commands(ctx, t, addr, prefix, end, fn, echo)
		want := []string{"evalsha", "lua:zrem", "lua:hmget", "lua:hset", "lua:pexpire"}
		if !slices.Equal(got, want) {
			t.Errorf("%s: commands %v, want %v", task, got, want)
		}
		st, err := l.Inspect(ctx, req("x"))
		if err != nil || len(st) != 1 {
			t.Fatalf("Inspect: %+v %v", st, err)
		}
		if n := len(st[0].Holders); n != 0 {
			t.Errorf("%s: %d slot holders after the run ended, want 0", task, n)
		}
		// One failure counted per run: the calls sent once, as Done.
		if want := map[string]int{"t1": 1, "t2": 2}[task]; st[0].Failures != want {
			t.Errorf("%s: breaker counts %d failures, want %d", task, st[0].Failures, want)
		}
	}
	m, err := New(cfg, NewMemory(), Options{Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.DoneCalls(req("t1"), OutcomeFailed); ok {
		t.Error("DoneCalls of a memory backend: ok, want false")
	}
}
