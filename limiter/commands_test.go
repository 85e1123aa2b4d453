package limiter

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestRedisConcurrencyDecisionCommands: what a concurrency decision costs
// Redis, counted from MONITOR: one EVALSHA whose script prunes the slots,
// counts them with ZCARD and takes one, raising the key's TTL to the
// slot's expiry with PEXPIRE GT (no ZRANGE for the latest expiry); ZSCORE
// (does the task hold a slot already?) is asked only at the cap, where
// the answer decides.
func TestRedisConcurrencyDecisionCommands(t *testing.T) {
	c := testRedisDirect(t)
	addr := c.Options().Addr
	prefix := uniquePrefix(t)
	l, err := New(rules(Rule{Name: "cap", Key: KeyHost, Limits: []Limit{{Concurrency: Concurrency{Max: 2}}}}),
		NewRedis(c, prefix), Options{Clock: clock.NewManual(t0)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	end := prefix + "end"
	allow := func(task string, want bool) func() {
		return func() {
			d, err := l.Allow(ctx, Request{Host: "h1", Diagnostic: "d", TaskID: task, Lease: time.Minute})
			if err != nil || d.Allowed != want {
				t.Fatalf("Allow %s: %+v %v, want allowed %v", task, d, err, want)
			}
		}
	}
	allow("warm", true)()
	for i, tc := range []struct {
		task  string
		allow bool
		want  []string
	}{
		{"t1", true, []string{"evalsha", "lua:zremrangebyscore", "lua:zcard", "lua:zadd", "lua:pexpire"}},
		// At the cap (warm and t1 hold the two slots): denied, the first
		// slot's expiry read for retry_after.
		{"t2", false, []string{"evalsha", "lua:zremrangebyscore", "lua:zcard", "lua:zscore", "lua:zrangebyscore"}},
		// The same task again at the cap keeps its slot.
		{"t1", true, []string{"evalsha", "lua:zremrangebyscore", "lua:zcard", "lua:zscore", "lua:zadd", "lua:pexpire"}},
	} {
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
