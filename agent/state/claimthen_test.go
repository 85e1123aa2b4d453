package state_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestRedisClaimThen: a Then runs inside the claim's script, with its own
// KEYS and ARGV, after the lease is taken and only when it is: one
// round trip, one EVALSHA, its reply beside the claim's; a claim that
// finds the task held elsewhere or done runs nothing of it. On a Cluster
// nothing is sent (folded false).
func TestRedisClaimThen(t *testing.T) {
	for name, c := range redisClients(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniquePrefix(t, c)
			clk := clock.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
			s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, Clock: clk})
			counter := prefix + "counter"
			then := state.Then{Source: `-- a Then: KEYS and ARGV its own
return redis.call('INCRBY', KEYS[1], ARGV[1]) .. ':' .. ARGV[2]`, Keys: []string{counter}, Args: []any{5, "x"}}
			claim := func(owner string) (state.Claim, any, bool) {
				cl, reply, folded, err := s.ClaimThen(ctx, state.TaskRecord{ID: "t1", Host: "h"}, owner, time.Minute, then)
				if err != nil {
					t.Fatal(err)
				}
				return cl, reply, folded
			}
			if _, ok := c.(*redis.ClusterClient); ok {
				if _, _, folded := claim("i-1"); folded {
					t.Fatal("ClaimThen on a Cluster: folded, want the caller to make two calls")
				}
				if n, _ := c.Exists(ctx, prefix+"task:{t1}").Result(); n != 0 {
					t.Fatal("ClaimThen on a Cluster wrote the claim")
				}
				return
			}
			cc := c.(*redis.Client)
			var rt roundTrips
			hooked := redis.NewClient(cc.Options())
			t.Cleanup(func() { _ = hooked.Close() })
			hooked.AddHook(&rt)
			s = state.NewRedis(hooked, state.RedisOptions{Prefix: prefix, Clock: clk})
			// Warm the script cache: a cold one costs an EVAL more.
			if _, _, _, err := s.ClaimThen(ctx, state.TaskRecord{ID: "warm", Host: "h"}, "i-1", time.Minute, then); err != nil {
				t.Fatal(err)
			}
			end := prefix + "end"
			echo := func() {
				if err := hooked.Echo(ctx, end).Err(); err != nil {
					t.Fatal(err)
				}
			}
			var cl state.Claim
			var reply any
			var folded bool
			before := rt.n.Load()
			got := testenv.Commands(ctx, t, testenv.RedisAddr(t), prefix, end, func() { cl, reply, folded = claim("i-1") }, echo)
			if n := rt.n.Load() - before - 1; n != 1 {
				t.Errorf("ClaimThen took %d round trips, want 1", n)
			}
			want := []string{"evalsha", "lua:hmget", "lua:hset", "lua:pexpire", "lua:set", "lua:hset", "lua:pexpire", "lua:incrby"}
			if !slices.Equal(got, want) {
				t.Errorf("commands %v, want %v", got, want)
			}
			if !folded || cl.Result != state.Claimed || cl.Record.Attempts != 1 || reply != "10:x" {
				t.Fatalf("ClaimThen = %+v, %v, folded %v; want claimed, attempt 1, then's reply 10:x", cl, reply, folded)
			}
			// Held by i-1: i-2's claim runs nothing of then.
			got = testenv.Commands(ctx, t, testenv.RedisAddr(t), prefix, end, func() { cl, reply, _ = claim("i-2") }, echo)
			if cl.Result != state.HeldElsewhere || reply != nil || slices.Contains(got, "lua:incrby") {
				t.Fatalf("ClaimThen of a held task = %+v, %v, commands %v; want held elsewhere, then not run", cl, reply, got)
			}
			if n, _ := hooked.Get(ctx, counter).Int(); n != 10 {
				t.Errorf("then ran to %d, want 10 (the warm-up and the claim)", n)
			}
			// A then that fails leaves the claim standing, without its reply.
			failing := state.Then{Source: `redis.call('INCRBY', KEYS[1], 1)
return redis.call('HGET', KEYS[1], 'x')`, Keys: []string{counter}}
			cl, reply, folded, err := s.ClaimThen(ctx, state.TaskRecord{ID: "t2", Host: "h"}, "i-1", time.Minute, failing)
			if err != nil || !folded || cl.Result != state.Claimed || reply != nil {
				t.Fatalf("ClaimThen with a failing then = %+v, %v, folded %v, %v; want claimed, no reply", cl, reply, folded, err)
			}
		})
	}
}
