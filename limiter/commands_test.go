package limiter

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestRedisConcurrencyDecisionCommands: what a concurrency decision costs
// Redis, counted from MONITOR: one EVALSHA whose script counts the live
// slots with ZCOUNT and takes one, raising the key's TTL to the slot's
// expiry with PEXPIRE GT (no ZRANGE for the latest expiry); ZSCORE (does
// the task hold a slot already?) is asked only at the cap, where the
// answer decides. Expired slots are pruned (ZREMRANGEBYSCORE) only by the
// decisions of one second in eight.
func TestRedisConcurrencyDecisionCommands(t *testing.T) {
	l, c, prefix, clk := capOfTwo(t)
	addr := c.Options().Addr
	ctx := context.Background()
	end := prefix + "end"
	allow := func(task string, want bool) func() {
		return func() {
			d, err := l.Allow(ctx, Request{Host: "h1", Diagnostic: "d", TaskID: task, Lease: time.Minute})
			if err != nil || d.Allowed != want {
				t.Fatalf("Allow %s: %+v %v, want allowed %v", task, d, err, want)
			}
			if want && task != "warm" && d.Counters.Running != 2 {
				t.Fatalf("Allow %s: running %d, want 2", task, d.Counters.Running)
			}
		}
	}
	allow("warm", true)()
	for i, tc := range []struct {
		task  string
		allow bool
		prune bool // decided at a pruning second
		want  []string
	}{
		{"t1", true, false, []string{"evalsha", "lua:zcount", "lua:zadd", "lua:pexpire"}},
		// At the cap (warm and t1 hold the two slots): denied, the first
		// slot's expiry read for retry_after.
		{"t2", false, false, []string{"evalsha", "lua:zcount", "lua:zscore", "lua:zrangebyscore"}},
		// The same task again at the cap keeps its slot; its ZADD adds
		// none, so the slots are counted again.
		{"t1", true, false, []string{"evalsha", "lua:zcount", "lua:zscore", "lua:zadd", "lua:zcount", "lua:pexpire"}},
		// One second in eight, the expired slots go too.
		{"t2", false, true, []string{"evalsha", "lua:zcount", "lua:zremrangebyscore", "lua:zscore", "lua:zrangebyscore"}},
	} {
		if tc.prune {
			clk.Set(t0.Add(8 * time.Second))
		}
		t.Run(fmt.Sprintf("%d_%s", i, tc.task), func(t *testing.T) {
			got := testenv.Commands(ctx, t, addr, prefix, end, allow(tc.task, tc.allow), func() {
				if err := c.Echo(ctx, end).Err(); err != nil {
					t.Fatal(err)
				}
			})
			if !slices.Equal(got, tc.want) {
				t.Fatalf("commands %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRedisExpiredSlotsBetweenPrunes: between the pruning seconds an
// expired slot (its holder died without giving it back) stays in the key
// but counts for nothing: a new run gets it, the dead run's task asking
// again counts once, and a decision in a pruning second removes it.
func TestRedisExpiredSlotsBetweenPrunes(t *testing.T) {
	l, c, prefix, clk := capOfTwo(t)
	ctx := context.Background()
	key := prefix + "lim:{h1}:c:cap"
	decide := func(task string, running int) {
		t.Helper()
		d, err := l.Allow(ctx, Request{Host: "h1", Diagnostic: "d", TaskID: task, Lease: time.Minute})
		if err != nil || !d.Allowed || d.Counters.Running != running {
			t.Fatalf("Allow %s at %v: %+v %v, want allowed with %d running", task, clk.Now().Sub(t0), d, err, running)
		}
	}
	members := func() int {
		t.Helper()
		n, err := c.ZCard(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return int(n)
	}
	decide("dead", 1)
	decide("live", 2)
	// dead's lease ends; live's is renewed by its run.
	clk.Set(t0.Add(50 * time.Second)) // 50 % 8 = 2: no pruning
	decide("live", 2)
	clk.Set(t0.Add(65 * time.Second)) // 65 % 8 = 1
	decide("new", 2)
	if n := members(); n != 3 {
		t.Fatalf("%d slots in the key, want 3 (dead's expired one kept until a pruning second)", n)
	}
	// At the cap, the dead run's task (redelivered) does not hold its
	// expired slot: denied.
	if d, err := l.Allow(ctx, Request{Host: "h1", Diagnostic: "d", TaskID: "dead", Lease: time.Minute}); err != nil || d.Allowed {
		t.Fatalf("Allow dead at the cap: %+v %v, want denied", d, err)
	}
	// Once the others' slots have expired too, it gets its expired slot
	// back (ZADD adds none) and counts once.
	clk.Set(t0.Add(130 * time.Second)) // 130 % 8 = 2
	decide("dead", 1)
	if n := members(); n != 3 {
		t.Fatalf("%d slots in the key, want 3 before a pruning second", n)
	}
	clk.Set(t0.Add(136 * time.Second)) // 136 % 8 = 0: pruning
	decide("other", 2)
	if n := members(); n != 2 {
		t.Fatalf("%d slots in the key after a pruning second, want 2 (dead and other)", n)
	}
}

// capOfTwo is a limiter on Redis with one rule, a concurrency cap of 2
// per host, its keys under a prefix of the test's own, on a manual clock
// at t0+1s (t0 is a pruning second, t0+1s not).
func capOfTwo(t *testing.T) (*Limiter, *redis.Client, string, *clock.Manual) {
	t.Helper()
	c := testRedisDirect(t)
	prefix := uniquePrefix(t)
	clk := clock.NewManual(t0.Add(time.Second))
	l, err := New(rules(Rule{Name: "cap", Key: KeyHost, Limits: []Limit{{Concurrency: Concurrency{Max: 2}}}}),
		NewRedis(c, prefix), Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return l, c, prefix, clk
}
