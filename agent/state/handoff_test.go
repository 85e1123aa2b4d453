package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/clock"

	"github.com/autodiag/autodiag/agent/state"
)

// TestRedisNoticeHandoff: a notice is handed only to a live agent (its
// heartbeat expiry in the instance index ahead of now), kept with the TTL
// given, read in order and from a position on, and dropped by Forget.
func TestRedisNoticeHandoff(t *testing.T) {
	for name, c := range redisClients(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			clk := clock.NewManual(time.Now())
			prefix := uniquePrefix(t, c)
			s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, Clock: clk})
			const hbTTL = 30 * time.Second
			if handed, err := s.Handoff.GiveNotice(ctx, "i-2", "n0", time.Minute); err != nil || handed {
				t.Fatalf("give to an unknown instance = %v, %v; want not handed", handed, err)
			}
			if n, _ := c.Exists(ctx, prefix+"handoff:i-2").Result(); n != 0 {
				t.Fatal("an unknown instance's notice was stored")
			}
			if err := s.PutInstance(ctx, state.Instance{ID: "i-2", State: "running"}, hbTTL); err != nil {
				t.Fatal(err)
			}
			for _, body := range []string{"n1", "n2"} {
				if handed, err := s.Handoff.GiveNotice(ctx, "i-2", body, time.Minute); err != nil || !handed {
					t.Fatalf("give %s = %v, %v; want handed", body, handed, err)
				}
			}
			if ttl, _ := c.PTTL(ctx, prefix+"handoff:i-2").Result(); ttl <= 0 || ttl > time.Minute {
				t.Fatalf("handed notices' TTL %s; want within the 1m given", ttl)
			}
			got, err := s.Handoff.TakeNotices(ctx, "i-2", "", 0)
			if err != nil || len(got) != 2 || got[0].Body != "n1" || got[1].Body != "n2" {
				t.Fatalf("take = %+v, %v; want n1, n2", got, err)
			}
			start := time.Now()
			rest, err := s.Handoff.TakeNotices(ctx, "i-2", got[1].ID, 50*time.Millisecond)
			if err != nil || len(rest) != 0 {
				t.Fatalf("take after the last = %+v, %v; want none", rest, err)
			}
			if time.Since(start) < 50*time.Millisecond {
				t.Fatal("an empty take did not block for its block time")
			}
			// Past its heartbeat expiry the agent is not live any more.
			clk.Add(hbTTL)
			if handed, err := s.Handoff.GiveNotice(ctx, "i-2", "n3", time.Minute); err != nil || handed {
				t.Fatalf("give to a lapsed agent = %v, %v; want not handed", handed, err)
			}
			if err := s.Handoff.ForgetNotices(ctx, "i-2"); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Handoff.TakeNotices(ctx, "i-2", "", 0); err != nil || len(got) != 0 {
				t.Fatalf("take after forget = %+v, %v; want none", got, err)
			}
		})
	}
}

// TestRedisTakeNoticesCancelled: a blocking read of handed notices ends
// when its context is cancelled, not when its block ends.
func TestRedisTakeNoticesCancelled(t *testing.T) {
	for name, c := range redisClients(t) {
		t.Run(name, func(t *testing.T) {
			s := state.NewRedis(c, state.RedisOptions{Prefix: uniquePrefix(t, c)})
			const block = 30 * time.Second
			for _, cancelAfter := range []time.Duration{0, 100 * time.Millisecond} {
				ctx, cancel := context.WithCancel(t.Context())
				start := time.Now()
				stop := context.AfterFunc(t.Context(), cancel)
				timer := time.AfterFunc(cancelAfter, cancel)
				got, err := s.Handoff.TakeNotices(ctx, "i-2", "", block)
				timer.Stop()
				stop()
				cancel()
				if err != nil || len(got) != 0 {
					t.Fatalf("take = %+v, %v; want none, no error", got, err)
				}
				if took := time.Since(start); took > block/3 {
					t.Fatalf("cancelled after %s, the read returned after %s; want long before its %s block", cancelAfter, took, block)
				}
			}
		})
	}
}
