package limiter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// TestRedisSlotsTTLFollowsLatestExpiry: a concurrency key lives until its
// latest slot's expiry. A slot taken later with a shorter lease does not
// shorten it (PEXPIRE GT), a renewal past it raises it, and the first slot
// of a new key gives it its TTL. A server that refuses GT (Redis before
// 7.0, emulated here by scripts whose PEXPIRE asks NX and GT together,
// which 7.0 refuses) gets the same TTLs from the latest score.
func TestRedisSlotsTTLFollowsLatestExpiry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse bool
	}{{"gt", false}, {"gt refused", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.refuse {
				a, h := allowScript, heldScript
				allowScript = redis.NewScript(strings.ReplaceAll(allowLua, "'GT'", "'NX', 'GT'"))
				heldScript = redis.NewScript(strings.ReplaceAll(heldLua, "'GT'", "'NX', 'GT'"))
				t.Cleanup(func() { allowScript, heldScript = a, h })
			}
			c := testRedisDirect(t)
			prefix := uniquePrefix(t)
			l, err := New(rules(Rule{Name: "cap", Key: KeyHost, Limits: []Limit{{Concurrency: Concurrency{Max: 3}}}}),
				NewRedis(c, prefix), Options{Clock: clock.NewManual(t0)})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			req := func(task string, lease time.Duration) Request {
				return Request{Host: "h1", Diagnostic: "d", TaskID: task, Lease: lease}
			}
			allow := func(task string, lease time.Duration) {
				if d, err := l.Allow(ctx, req(task, lease)); err != nil || !d.Allowed {
					t.Fatalf("Allow %s: %+v %v", task, d, err)
				}
			}
			key := ""
			ttl := func(lo, hi time.Duration) {
				t.Helper()
				if key == "" {
					ks, err := c.Keys(ctx, prefix+"*:c:cap").Result()
					if err != nil || len(ks) != 1 {
						t.Fatalf("slots keys %v %v, want one", ks, err)
					}
					key = ks[0]
				}
				got := c.PTTL(ctx, key).Val()
				if got < lo || got > hi {
					t.Fatalf("%s TTL %v, want within [%v, %v]", key, got, lo, hi)
				}
			}
			allow("t1", 10*time.Minute)
			ttl(9*time.Minute, 10*time.Minute)
			allow("t2", time.Minute) // a shorter lease later: the TTL stays
			ttl(9*time.Minute, 10*time.Minute)
			if err := l.Renew(ctx, req("t2", time.Minute), 20*time.Minute); err != nil {
				t.Fatal(err)
			}
			ttl(19*time.Minute, 20*time.Minute)
			if err := l.Renew(ctx, req("t1", 10*time.Minute), 2*time.Minute); err != nil {
				t.Fatal(err)
			}
			ttl(19*time.Minute, 20*time.Minute) // t2's slot still runs to 20 min
		})
	}
}
