package state_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// roundTrips counts the client's round trips: each command or pipeline
// sent is one, but for a new connection's handshake (HELLO, CLIENT).
type roundTrips struct{ n atomic.Int64 }

func handshake(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// claimedTask is a standalone store whose client counts its round trips,
// holding task t1 claimed by i-1.
type claimedTask struct {
	addr, prefix string
	c            *redis.Client
	rt           roundTrips
	s            state.Store
	rec          state.TaskRecord
}

func newClaimedTask(t *testing.T) *claimedTask {
	t.Helper()
	f := &claimedTask{addr: testenv.RedisAddr(t)}
	f.c = redis.NewClient(&redis.Options{Addr: f.addr})
	t.Cleanup(func() { _ = f.c.Close() })
	f.c.AddHook(&f.rt)
	f.prefix = uniquePrefix(t, f.c)
	clk := clock.NewManual(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	f.s = state.NewRedis(f.c, state.RedisOptions{Prefix: f.prefix, Clock: clk})
	f.rec = state.TaskRecord{ID: "t1", Diagnostic: "d", Host: "h"}
	if cl, err := f.s.Claim(context.Background(), f.rec, "i-1", time.Minute); err != nil || cl.Result != state.Claimed {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	return f
}

// finishSeen finishes rec with x and returns the commands MONITOR saw
// and the round trips the finish took.
func (f *claimedTask) finishSeen(t *testing.T, rec state.TaskRecord, x state.FinishExtras) ([]string, int64) {
	t.Helper()
	ctx := context.Background()
	end := f.prefix + "end"
	before := f.rt.n.Load()
	got := testenv.Commands(ctx, t, f.addr, f.prefix, end, func() {
		if err := f.s.Finish(ctx, rec, x); err != nil {
			t.Fatalf("finish with a failing call: %v", err)
		}
	}, func() {
		if err := f.c.Echo(ctx, end).Err(); err != nil {
			t.Fatal(err)
		}
	})
	return got, f.rt.n.Load() - before - 1 // the Echo is one
}

// retryWithoutCalls finishes rec again with x less its calls, as the
// worker's backlog does, and checks that nothing ran twice (counter holds
// want) and the record is done.
func (f *claimedTask) retryWithoutCalls(t *testing.T, rec state.TaskRecord, x state.FinishExtras, counter string, want int) {
	t.Helper()
	ctx := context.Background()
	x.Calls = nil
	if err := f.s.Finish(ctx, rec, x); err != nil {
		t.Fatalf("retried finish: %v", err)
	}
	if n, err := f.c.Get(ctx, counter).Int(); err != nil || n != want {
		t.Errorf("counter %d (%v), want %d: each call ran once", n, err, want)
	}
	got, ok, err := f.s.Task(ctx, rec.ID)
	if err != nil || !ok || got.Status != state.StatusDone || got.Outcome != rec.Outcome {
		t.Errorf("record after finish: %+v %v %v", got, ok, err)
	}
}

// TestRedisFinishCalls: FinishExtras.Calls ride ahead of the record in
// the finish's one round trip (MONITOR shows the call's commands first,
// then the finish script's), a failing call is told to its Done and does
// not fail the finish, and a retry of the finish without them (what the
// worker's backlog sends) writes nothing twice and runs no call again.
func TestRedisFinishCalls(t *testing.T) {
	ctx := context.Background()
	f := newClaimedTask(t)
	c, prefix, s, rec := f.c, f.prefix, f.s, f.rec
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	bad := redis.NewScript(`return redis.call('NOSUCHCOMMAND', KEYS[1])`)
	counter := prefix + "counter"
	var dones []error
	calls := []state.Call{
		{Script: incr, Keys: []string{counter}, Fallback: func(context.Context) { t.Error("fallback of a Redis store") },
			Done: func(err error) { dones = append(dones, err) }},
		{Script: bad, Keys: []string{prefix + "bad"}, Fallback: func(context.Context) { t.Error("fallback of a Redis store") },
			Done: func(err error) { dones = append(dones, err) }},
	}
	rec.Owner, rec.Attempts, rec.Outcome = "i-1", 1, "succeeded"
	x := state.FinishExtras{ID: state.NewFinishID(), Calls: calls}
	// Warm the script cache first: a cold one costs an EVAL more.
	for _, sc := range []*redis.Script{incr, bad} {
		if err := sc.Load(ctx, c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finish(ctx, state.TaskRecord{ID: "warm"}, state.FinishExtras{}); err != nil {
		t.Fatal(err)
	}
	got, trips := f.finishSeen(t, rec, x)
	if n := trips; n != 1 {
		t.Errorf("finish with calls took %d round trips, want 1", n)
	}
	// The record is i-1's, claimed with a live lease: its TTL stands.
	want := []string{"evalsha", "lua:incr", "evalsha", "evalsha", "lua:hmget", "lua:hdel", "lua:hset"}
	if !slices.Equal(got, want) {
		t.Errorf("commands %v, want %v", got, want)
	}
	if len(dones) != 2 || dones[0] != nil || dones[1] == nil {
		t.Errorf("calls' Done got %v, want nil then the failing call's error", dones)
	}
	f.retryWithoutCalls(t, rec, x, counter, 1)
}

// TestRedisFinishCallsCluster: on a Cluster the calls go in the finish's
// pipeline to their own nodes: each runs once, its Done is told, and the
// record is written.
func TestRedisFinishCallsCluster(t *testing.T) {
	c, ok := redisClients(t)["cluster"]
	if !ok {
		t.Skip("no cluster: AUTODIAG_TEST_REDIS_CLUSTER_ADDRS is not set")
	}
	ctx := context.Background()
	prefix := uniquePrefix(t, c)
	s := state.NewRedis(c, state.RedisOptions{Prefix: prefix})
	rec := state.TaskRecord{ID: "t1", Diagnostic: "d", Host: "h"}
	if cl, err := s.Claim(ctx, rec, "i-1", time.Minute); err != nil || cl.Result != state.Claimed {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	var dones []error
	var calls []state.Call
	for i := range 3 { // keys in three slots, likely on different nodes
		calls = append(calls, state.Call{Script: incr, Keys: []string{fmt.Sprintf("%scounter:{%d}", prefix, i)},
			Fallback: func(context.Context) { t.Error("fallback of a Redis store") },
			Done:     func(err error) { dones = append(dones, err) }})
	}
	rec.Owner, rec.Attempts, rec.Outcome = "i-1", 1, "succeeded"
	x := state.FinishExtras{ID: state.NewFinishID(), Calls: calls}
	if err := s.Finish(ctx, rec, x); err != nil {
		t.Fatal(err)
	}
	x.Calls = nil
	if err := s.Finish(ctx, rec, x); err != nil {
		t.Fatalf("retried finish: %v", err)
	}
	if len(dones) != 3 || dones[0] != nil || dones[1] != nil || dones[2] != nil {
		t.Errorf("calls' Done got %v, want 3 × nil", dones)
	}
	for _, c2 := range calls {
		if n, err := c.Get(ctx, c2.Keys[0]).Int(); err != nil || n != 1 {
			t.Errorf("%s ran %d times (%v), want 1", c2.Keys[0], n, err)
		}
	}
	if got, ok, err := s.Task(ctx, "t1"); err != nil || !ok || got.Status != state.StatusDone {
		t.Errorf("record after finish: %+v %v %v", got, ok, err)
	}
}

// TestRedisFinishFoldsCalls: calls that give their source run inside the
// finish's script on a standalone server: one EVALSHA in one round trip,
// the calls' commands first; a failing call is told to its Done and does
// not fail the finish, and a retry without the calls writes nothing twice.
func TestRedisFinishFoldsCalls(t *testing.T) {
	f := newClaimedTask(t)
	prefix, rec := f.prefix, f.rec
	const incrSrc = `return redis.call('INCR', KEYS[1]) + tonumber(ARGV[1])`
	const badSrc = `return redis.call('HSET', KEYS[1])`
	counter := prefix + "counter"
	var dones []error
	call := func(src string, key string, args ...any) state.Call {
		return state.Call{Script: redis.NewScript(src), Source: src, Keys: []string{key}, Args: args,
			Fallback: func(context.Context) { t.Error("fallback of a Redis store") },
			Done:     func(err error) { dones = append(dones, err) }}
	}
	calls := []state.Call{call(incrSrc, counter, 1), call(badSrc, prefix+"bad"), call(incrSrc, counter, 2)}
	rec.Owner, rec.Attempts, rec.Outcome = "i-1", 1, "succeeded"
	x := state.FinishExtras{ID: state.NewFinishID(), Calls: calls}
	got, trips := f.finishSeen(t, rec, x)
	// A cold script cache costs one EVALSHA refused and an EVAL: count
	// the round trips of the script's first run apart.
	if n := trips; n < 1 || n > 2 {
		t.Errorf("finish with folded calls took %d round trips, want 1 (2 with the script not cached)", n)
	}
	want := []string{"lua:incr", "lua:incr", "lua:hmget", "lua:hdel", "lua:hset"}
	if len(got) == 0 || (got[0] != "evalsha" && got[0] != "eval") || !slices.Equal(got[len(got)-len(want):], want) {
		t.Errorf("commands %v, want one script call running %v", got, want)
	}
	if len(dones) != 3 || dones[0] != nil || dones[1] == nil || dones[2] != nil {
		t.Errorf("calls' Done got %v, want nil, the failing call's error, nil", dones)
	}
	f.retryWithoutCalls(t, rec, x, counter, 2)
}
