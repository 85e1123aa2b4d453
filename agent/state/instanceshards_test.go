package state_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
)

// TestRedisInstanceShards: with InstanceShards 4 each heartbeat writes
// the agent's entry to P instances:{n}, n the FNV-1a of its id mod 4, and
// none to P instances; Instances lists every shard's agents, gone once
// their heartbeat lapsed, and Live (the hand-off's check) answers from
// the agent's own shard exactly as from one index: live while its
// heartbeat expiry is ahead of now, not at it.
func TestRedisInstanceShards(t *testing.T) {
	for name, c := range redisClients(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniquePrefix(t, c)
			clk := clock.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			const shards, ttl = 4, 30 * time.Second
			s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, Clock: clk, InstanceShards: shards})
			var ids []string
			used := map[int]bool{}
			for i := range 8 {
				id := fmt.Sprintf("i-%02d", i)
				ids = append(ids, id)
				if err := s.PutInstance(ctx, state.Instance{ID: id, State: "running"}, ttl); err != nil {
					t.Fatal(err)
				}
				h := fnv.New32a()
				h.Write([]byte(id))
				n := int(h.Sum32() % shards)
				used[n] = true
				key := fmt.Sprintf("%sinstances:{%d}", prefix, n)
				score, err := c.ZScore(ctx, key, id).Result()
				if err != nil || score != float64(clk.Now().Add(ttl).UnixMilli()) {
					t.Errorf("%s in %s: score %v (%v), want its heartbeat expiry", id, key, score, err)
				}
			}
			if len(used) < 2 {
				t.Fatalf("the ids fell in %d shard(s): the test needs them spread", len(used))
			}
			if n, err := c.Exists(ctx, prefix+"instances").Result(); err != nil || n != 0 {
				t.Errorf("%sinstances exists (%d, %v), want the shards only", prefix, n, err)
			}
			list, err := s.Instances(ctx)
			if err != nil || len(list) != len(ids) {
				t.Fatalf("Instances: %d (%v), want %d", len(list), err, len(ids))
			}
			for i, inst := range list {
				if inst.ID != ids[i] || inst.State != "running" {
					t.Errorf("Instances[%d] = %s %s, want %s running", i, inst.ID, inst.State, ids[i])
				}
			}
			// i-00 keeps beating, the others stop: at their expiry they
			// are no longer live, and gone in the listing.
			clk.Add(ttl / 2)
			if err := s.PutInstance(ctx, state.Instance{ID: "i-00", State: "running"}, ttl); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				at   time.Duration // since the first beats
				id   string
				live bool
			}{{ttl - time.Millisecond, "i-01", true}, {ttl, "i-01", false}, {ttl, "i-00", true}, {ttl, "i-99", false}} {
				clk.Set(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).Add(tc.at))
				if live, err := s.Handoff.Live(ctx, tc.id); err != nil || live != tc.live {
					t.Errorf("Live(%s) at +%s = %v, %v; want %v", tc.id, tc.at, live, err, tc.live)
				}
			}
			list, err = s.Instances(ctx)
			if err != nil || len(list) != len(ids) {
				t.Fatalf("Instances: %d (%v), want %d", len(list), err, len(ids))
			}
			for _, inst := range list {
				want := state.StateGone
				if inst.ID == "i-00" {
					want = "running"
				}
				if inst.State != want {
					t.Errorf("%s listed %s, want %s", inst.ID, inst.State, want)
				}
			}
		})
	}
}
