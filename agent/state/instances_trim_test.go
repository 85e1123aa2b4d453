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

// TestRedisInstanceIndexTrim: a heartbeat writes the record and the index
// entry; the index's trim (expired ids, the MaxInstances cap, its TTL) and
// the in-flight hash's TTL come with the writer's first heartbeat and then
// at most once a minute of the store's clock.
func TestRedisInstanceIndexTrim(t *testing.T) {
	ctx := context.Background()
	c := redisClients(t)["standalone"]
	prefix := uniquePrefix(t, c)
	clk := clock.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, Clock: clk, MaxInstances: 2})
	addr := testenv.RedisAddr(t)
	end := prefix + "end"
	put := func(id string) []string {
		return testenv.Commands(ctx, t, addr, prefix, end, func() {
			if err := s.PutInstance(ctx, state.Instance{ID: id, State: "running"}, 30*time.Second); err != nil {
				t.Fatal(err)
			}
		}, func() {
			if err := c.Echo(ctx, end).Err(); err != nil {
				t.Fatal(err)
			}
		})
	}
	trimmed := []string{"set", "zadd", "zremrangebyscore", "zremrangebyrank", "pexpire", "pexpire"}
	plain := []string{"set", "zadd"} // the in-flight hash's TTL rides with the trim
	steps := []struct {
		advance time.Duration
		id      string
		want    []string
		index   int64
	}{
		{0, "i-1", trimmed, 1},
		{10 * time.Second, "i-2", plain, 2},
		{10 * time.Second, "i-3", plain, 3}, // over the cap until the next trim
		{40 * time.Second, "i-1", trimmed, 2},
		{10 * time.Second, "i-1", plain, 2},
	}
	for i, st := range steps {
		clk.Add(st.advance)
		if got := put(st.id); !slices.Equal(got, st.want) {
			t.Fatalf("step %d (%s): commands %v, want %v", i, st.id, got, st.want)
		}
		if n := c.ZCard(ctx, prefix+"instances").Val(); n != st.index {
			t.Fatalf("step %d: index holds %d, want %d", i, n, st.index)
		}
	}
	if ttl := c.PTTL(ctx, prefix+"instances").Val(); ttl <= 0 {
		t.Fatalf("index TTL %v, want one", ttl)
	}
}

// TestRedisHeartbeatNamesOneRoundTrip: an agent's heartbeat writes its
// record, its index entry and one ZADD per host name, all in one round
// trip however many names it has (the closing note of issue 45 asked).
func TestRedisHeartbeatNamesOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	addr := testenv.RedisAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	var rt roundTrips
	c.AddHook(&rt)
	prefix := uniquePrefix(t, c)
	clk := clock.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, Clock: clk})
	inst := state.Instance{ID: "i-1", State: "running", Names: []string{"node-1.example", "10.0.0.1", "ip-10-0-0-1", "i-1"}}
	if err := s.PutInstance(ctx, inst, 30*time.Second); err != nil { // the first one trims
		t.Fatal(err)
	}
	clk.Add(10 * time.Second)
	end := prefix + "end"
	before := rt.n.Load()
	got := testenv.Commands(ctx, t, addr, prefix, end, func() {
		if err := s.PutInstance(ctx, inst, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if err := c.Echo(ctx, end).Err(); err != nil {
			t.Fatal(err)
		}
	})
	if n := rt.n.Load() - before - 1; n != 1 { // less the closing ECHO
		t.Errorf("a heartbeat with %d names took %d round trips, want 1", len(inst.Names), n)
	}
	want := []string{"set", "zadd"}
	for range inst.Names {
		want = append(want, "zadd")
	}
	if !slices.Equal(got, want) {
		t.Errorf("a heartbeat's commands %v, want %v (one ZADD per name)", got, want)
	}
}
