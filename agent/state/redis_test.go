package state_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/state/statetest"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// redisClients returns the Redis deployments to test against: a standalone
// server from AUTODIAG_TEST_REDIS_ADDR and a cluster from
// AUTODIAG_TEST_REDIS_CLUSTER_ADDRS (comma-separated seeds). Without the
// standalone address the test skips locally and fails under CI=true.
func redisClients(t *testing.T) map[string]redis.UniversalClient {
	t.Helper()
	out := map[string]redis.UniversalClient{}
	addr := testenv.RedisAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	out["standalone"] = c
	if seeds := os.Getenv("AUTODIAG_TEST_REDIS_CLUSTER_ADDRS"); seeds != "" {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(seeds, ",")})
		t.Cleanup(func() { _ = cc.Close() })
		out["cluster"] = cc
	}
	return out
}

// uniquePrefix gives each test its own key space and deletes it afterwards.
func uniquePrefix(t *testing.T, c redis.UniversalClient) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "autodiagtest:" + strings.ReplaceAll(t.Name(), "/", ".") + ":" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() { deletePrefix(c, prefix) })
	return prefix
}

func deletePrefix(c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	del := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			n.Del(ctx, iter.Val())
		}
		return iter.Err()
	}
	switch cc := c.(type) {
	case *redis.ClusterClient:
		_ = cc.ForEachMaster(ctx, del)
	case *redis.Client:
		_ = del(ctx, cc)
	}
}

func TestRedisConformance(t *testing.T) {
	for name, c := range redisClients(t) {
		// Sharding the instance index changes no answer of the store.
		for _, shards := range []int{1, 3} {
			sub := name
			if shards > 1 {
				sub = fmt.Sprintf("%s_instance_shards_%d", name, shards)
			}
			t.Run(sub, func(t *testing.T) {
				statetest.Run(t, func(t *testing.T, clock *clock.Manual) state.Store {
					return state.NewRedis(c, state.RedisOptions{
						Prefix:         uniquePrefix(t, c),
						Clock:          clock,
						RecordTTL:      statetest.RecordTTL,
						AuditMaxLen:    statetest.AuditCap,
						InstanceShards: shards,
					})
				})
			})
		}
	}
}

// TestRedisKeys checks the key layout of the contract and that every key the
// store writes carries a TTL or is a bounded stream.
func TestRedisKeys(t *testing.T) {
	ctx := context.Background()
	c := redisClients(t)["standalone"].(*redis.Client)
	prefix := uniquePrefix(t, c)
	s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, AuditMaxLen: 50})
	cl, err := s.Claim(ctx, state.TaskRecord{ID: "evt-1", Host: "h"}, "i-1", time.Minute)
	if err != nil || cl.Result != state.Claimed {
		t.Fatalf("Claim = %v, %v", cl.Result, err)
	}
	if _, err := s.Claim(ctx, state.TaskRecord{ID: "evt-2"}, "i-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	done := cl.Record
	done.Outcome = "succeeded"
	if err := s.Finish(ctx, done, state.FinishExtras{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Audit(ctx, state.AuditEntry{TaskID: "evt-1", Outcome: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutInstance(ctx, state.Instance{ID: "i-1", State: "running"}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveDrain(ctx, "i-1", state.DrainRecord{Deadline: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{ // key → the TTL it must at least have; -1 = bounded, no TTL needed
		prefix + "task:{evt-1}":  23 * time.Hour,
		prefix + "task:{evt-2}":  23 * time.Hour,
		prefix + "lease:{evt-2}": 50 * time.Second,
		prefix + "lease:{evt-1}": 0, // finished: left to its PX (checked below)
		prefix + "inflight:i-1":  23 * time.Hour,
		prefix + "instance:i-1":  20 * time.Second,
		prefix + "instances":     23 * time.Hour,
		prefix + "drain:i-1":     24 * time.Hour,
		prefix + "audit":         -1,
	}
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		seen[k] = true
		min, ok := want[k]
		if !ok {
			t.Errorf("unexpected key %s", k)
			continue
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if min < 0 {
			if typ := c.Type(ctx, k).Val(); typ != "stream" {
				t.Errorf("%s is a %s, want a capped stream", k, typ)
			}
			continue
		}
		if ttl < min {
			t.Errorf("%s TTL %v, want at least %v", k, ttl, min)
		}
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("key %s missing (have %v)", k, keys)
		}
	}
	// The finish leaves the lease to its PX (a minute here): bounded,
	// never kept; a claim of the finished task finds it done.
	if ttl := c.PTTL(ctx, prefix+"lease:{evt-1}").Val(); ttl > time.Minute || ttl == -1 {
		t.Errorf("lease of a finished task has TTL %v, want its PX of at most a minute", ttl)
	}
	if again, err := s.Claim(ctx, state.TaskRecord{ID: "evt-1"}, "i-2", time.Minute); err != nil || again.Result != state.AlreadyDone {
		t.Errorf("Claim of the finished task by another agent = %v, %v; want AlreadyDone", again.Result, err)
	}
}

// TestRedisLeaseKeyExpiry: the lease key's PX bounds a lease in Redis time
// even when the store's clock would still call it live.
func TestRedisLeaseKeyExpiry(t *testing.T) {
	ctx := context.Background()
	c := redisClients(t)["standalone"]
	prefix := uniquePrefix(t, c)
	clock := clock.NewManual(time.Now()) // never advanced
	s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, Clock: clock})
	if cl, err := s.Claim(ctx, state.TaskRecord{ID: "t"}, "a", 50*time.Millisecond); err != nil || cl.Result != state.Claimed {
		t.Fatalf("Claim = %v, %v", cl.Result, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	poll := time.NewTicker(10 * time.Millisecond) // polling an observable condition
	defer poll.Stop()
	for {
		cl, err := s.Claim(ctx, state.TaskRecord{ID: "t"}, "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if cl.Result == state.Claimed {
			if cl.Record.Attempts != 2 {
				t.Errorf("attempts = %d, want 2", cl.Record.Attempts)
			}
			return
		}
		if cl.Result != state.HeldElsewhere || cl.LeaseRemaining > 50*time.Millisecond {
			t.Fatalf("claim while the lease key lives = %v (remaining %v)", cl.Result, cl.LeaseRemaining)
		}
		if time.Now().After(deadline) {
			t.Fatal("lease key never expired")
		}
		<-poll.C
	}
}

// TestRedisOutputBound: output beyond MaxOutput is cut on a rune boundary and
// marked truncated.
func TestRedisOutputBound(t *testing.T) {
	ctx := context.Background()
	c := redisClients(t)["standalone"]
	s := state.NewRedis(c, state.RedisOptions{Prefix: uniquePrefix(t, c), MaxOutput: 5})
	tests := []struct {
		name, in, want string
		truncated      bool
	}{
		{"short", "abc", "abc", false},
		{"exact", "abcde", "abcde", false},
		{"ascii", "abcdefgh", "abcde", true},
		{"rune boundary", "abcdé", "abcd", true}, // é is 2 bytes: 6 in all
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := "t-" + tc.name
			if err := s.Finish(ctx, state.TaskRecord{ID: id, Output: tc.in}, state.FinishExtras{}); err != nil {
				t.Fatal(err)
			}
			rec, ok, err := s.Task(ctx, id)
			if err != nil || !ok {
				t.Fatalf("Task: %v %v", ok, err)
			}
			if rec.Output != tc.want || rec.Truncated != tc.truncated {
				t.Errorf("output %q truncated %v, want %q %v", rec.Output, rec.Truncated, tc.want, tc.truncated)
			}
		})
	}
}

// TestRedisRecoverAfterClaimCrash: an in-flight entry left by a crash between
// its write and the claim script (the record runs under another owner) is
// dropped by Recover without touching the record.
func TestRedisRecoverAfterClaimCrash(t *testing.T) {
	ctx := context.Background()
	c := redisClients(t)["standalone"]
	prefix := uniquePrefix(t, c)
	s := state.NewRedis(c, state.RedisOptions{Prefix: prefix})
	if cl, err := s.Claim(ctx, state.TaskRecord{ID: "t"}, "b", time.Minute); err != nil || cl.Result != state.Claimed {
		t.Fatalf("Claim = %v, %v", cl.Result, err)
	}
	if err := c.HSet(ctx, prefix+"inflight:a", "t", `{"task_id":"t"}`).Err(); err != nil {
		t.Fatal(err)
	}
	if es, err := s.Inflight(ctx, "a"); err != nil || len(es) != 0 {
		t.Errorf("Inflight(a) = %v, %v; want the stale entry hidden", es, err)
	}
	recs, err := s.Recover(ctx, "a")
	if err != nil || len(recs) != 0 {
		t.Fatalf("Recover(a) = %v, %v; want nothing", recs, err)
	}
	if n := c.HLen(ctx, prefix+"inflight:a").Val(); n != 0 {
		t.Errorf("stale entry not dropped")
	}
	if rec, _, _ := s.Task(ctx, "t"); rec.Status != state.StatusRunning || rec.Owner != "b" {
		t.Errorf("record = %+v, want still running under b", rec)
	}
}

func TestRedisPingError(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	s := state.NewRedis(c, state.RedisOptions{})
	err := s.Ping(context.Background())
	if err == nil {
		t.Fatal("Ping to a closed port succeeded")
	}
	if !strings.HasPrefix(err.Error(), "state: ping:") {
		t.Errorf("error %q not wrapped with context", err)
	}
}

// TestRedisScriptsReloadAfterFlush: claim and finish send their script by
// EVALSHA inside a pipeline; a server that lost its script cache (restart,
// SCRIPT FLUSH, failover) must still get them.
func TestRedisScriptsReloadAfterFlush(t *testing.T) {
	for name, c := range redisClients(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := state.NewRedis(c, state.RedisOptions{Prefix: "autodiag-test:flush:" + name + ":"})
			flush := func() {
				t.Helper()
				if cc, ok := c.(*redis.ClusterClient); ok {
					if err := cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() }); err != nil {
						t.Fatal(err)
					}
					return
				}
				if err := c.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			flush()
			cl, err := s.Claim(ctx, state.TaskRecord{ID: "flush-1"}, "a", time.Minute)
			if err != nil || cl.Result != state.Claimed {
				t.Fatalf("claim after SCRIPT FLUSH = %+v, %v", cl, err)
			}
			if got, _ := s.Inflight(ctx, "a"); len(got) != 1 {
				t.Fatalf("in-flight after claim = %v", got)
			}
			flush()
			if err := s.Finish(ctx, state.TaskRecord{ID: "flush-1", Owner: "a", Outcome: "succeeded", Attempts: 1}, state.FinishExtras{}); err != nil {
				t.Fatalf("finish after SCRIPT FLUSH: %v", err)
			}
			if got, _ := s.Inflight(ctx, "a"); len(got) != 0 {
				t.Fatalf("in-flight after finish = %v", got)
			}
			rec, ok, err := s.Task(ctx, "flush-1")
			if err != nil || !ok || rec.Status != state.StatusDone {
				t.Fatalf("record = %+v %v %v", rec, ok, err)
			}
			c.Del(ctx, s.TaskStore.(*state.RedisRecords).TaskKey("flush-1"))
		})
	}
}

// A record written before the request and result fields existed reads
// back with them empty.
func TestRedisOldRecordReadable(t *testing.T) {
	for name, c := range redisClients(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := uniquePrefix(t, c)
			old := `{"id":"old-1","status":"done","owner":"a","attempts":1,"host":"web-1","diagnostic":"uptime",` +
				`"started_at":"2026-11-01T10:00:00Z","finished_at":"2026-11-01T10:00:01Z","exit_code":0,"output":"up 3 days","outcome":"succeeded"}`
			if err := c.HSet(ctx, prefix+"task:{old-1}", "rec", old, "status", "done", "owner", "a", "attempts", 1).Err(); err != nil {
				t.Fatal(err)
			}
			rec, ok, err := state.NewRedis(c, state.RedisOptions{Prefix: prefix}).Task(ctx, "old-1")
			if err != nil || !ok {
				t.Fatalf("Task = %v, %v", ok, err)
			}
			if rec.Output != "up 3 days" || rec.Outcome != "succeeded" || rec.Params != nil || rec.Alert != nil ||
				rec.Limiter != nil || rec.Report != nil || !rec.ReceivedAt.IsZero() {
				t.Errorf("record = %+v, want the old fields and the new ones empty", rec)
			}
		})
	}
}

// A task's end on a standalone server: the record, the in-flight entry,
// the audit entry and the writes that go with it (an outbox event, a
// report job) in one round trip; a superseded finish writes its audit
// entry only; a retry of a finish that landed writes nothing again.
func TestRedisFinishOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	hook := &testenv.RoundTrips{}
	c.AddHook(hook)
	prefix := uniquePrefix(t, c)
	clock := clock.NewManual(time.Now().Truncate(time.Millisecond))
	s := state.NewRedis(c, state.RedisOptions{Prefix: prefix, Clock: clock})
	outbox, jobs := prefix+"{notify}:outbox", prefix+"{report}:jobs"
	var landed []string
	extras := func(id, taskID string) state.FinishExtras {
		x := state.FinishExtras{ID: id, Audit: &state.AuditEntry{InstanceID: "a", TaskID: taskID, Outcome: "failed"}}
		for _, stream := range []string{outbox, jobs} {
			x.Writes = append(x.Writes, state.Write{
				Stream: &redis.XAddArgs{Stream: stream, MaxLen: 100, Approx: true, Values: []any{"task", taskID, "body", []byte("{}")}},
				Apply:  func(context.Context) { t.Errorf("Apply of %s called; its XADD goes with the record", stream) },
				Done:   func(id string) { landed = append(landed, stream+" "+id) },
			})
		}
		return x
	}
	finish := func(taskID, owner, id string) error {
		cl, err := s.Claim(ctx, state.TaskRecord{ID: taskID}, owner, time.Minute)
		if err != nil || cl.Result != state.Claimed {
			t.Fatalf("Claim %s = %+v, %v", taskID, cl, err)
		}
		rec := cl.Record
		rec.Owner, rec.Outcome = owner, "failed"
		hook.Reset()
		return s.Finish(ctx, rec, extras(id, taskID))
	}
	// The first Finish loads the script (EVALSHA, then EVAL).
	if err := finish("warm", "a", "f0"); err != nil {
		t.Fatal(err)
	}
	landed = nil
	if err := finish("t1", "a", "f1"); err != nil {
		t.Fatal(err)
	}
	if n := hook.N(); n != 1 {
		t.Errorf("Finish with audit, outbox event and report job took %d round trips, want 1", n)
	}
	if len(landed) != 2 {
		t.Errorf("writes landed = %v, want the outbox event and the report job", landed)
	}
	streamLen := func(k string) int64 { return c.XLen(ctx, k).Val() }
	if got := []int64{streamLen(outbox), streamLen(jobs), streamLen(prefix + "audit")}; got[0] != 2 || got[1] != 2 || got[2] != 2 {
		t.Errorf("outbox, jobs, audit lengths = %v, want 2 each (warm-up and t1)", got)
	}
	if ids, _ := s.InflightIDs(ctx, "a"); len(ids) != 0 {
		t.Errorf("in-flight of a = %v, want none", ids)
	}

	// A retry of f1 whose reply was lost.
	cl, _, _ := s.Task(ctx, "t1")
	if err := s.Finish(ctx, cl, extras("f1", "t1")); err != nil {
		t.Fatalf("repeated Finish: %v", err)
	}
	if got := []int64{streamLen(outbox), streamLen(jobs), streamLen(prefix + "audit")}; got[0] != 2 || got[1] != 2 || got[2] != 2 {
		t.Errorf("after a repeated finish: outbox, jobs, audit lengths = %v, want 2 each", got)
	}

	// Superseded: b claimed the task after a's lease lapsed.
	clA, err := s.Claim(ctx, state.TaskRecord{ID: "t2"}, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Minute + time.Second)
	if cl, err := s.Claim(ctx, state.TaskRecord{ID: "t2"}, "b", time.Minute); err != nil || cl.Result != state.Claimed {
		t.Fatalf("b's Claim after a's lease = %+v, %v", cl.Result, err)
	}
	late := clA.Record
	late.Owner, late.Outcome = "a", "failed"
	if err := s.Finish(ctx, late, extras("f2", "t2")); !errors.Is(err, state.ErrSuperseded) {
		t.Fatalf("late Finish = %v, want ErrSuperseded", err)
	}
	if got := []int64{streamLen(outbox), streamLen(jobs), streamLen(prefix + "audit")}; got[0] != 2 || got[1] != 2 || got[2] != 3 {
		t.Errorf("after a superseded finish: outbox, jobs, audit lengths = %v, want 2, 2, 3", got)
	}
}

// A claim on a standalone server is one round trip whatever its result,
// and writes the claimer's in-flight entry only when it claims: a task
// held by another owner, or already done, leaves none behind.
func TestRedisClaimOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	hook := &testenv.RoundTrips{}
	c.AddHook(hook)
	prefix := uniquePrefix(t, c)
	s := state.NewRedis(c, state.RedisOptions{Prefix: prefix})
	claim := func(taskID, owner string) state.Claim {
		t.Helper()
		hook.Reset()
		cl, err := s.Claim(ctx, state.TaskRecord{ID: taskID}, owner, time.Minute)
		if err != nil {
			t.Fatalf("Claim %s by %s: %v", taskID, owner, err)
		}
		return cl
	}
	claim("warm", "a") // loads the script (EVALSHA, then EVAL)
	for _, tc := range []struct {
		name, owner string
		want        state.ClaimResult
	}{
		{"claimed", "a", state.Claimed},
		{"held elsewhere", "b", state.HeldElsewhere},
	} {
		if cl := claim("t1", tc.owner); cl.Result != tc.want {
			t.Errorf("%s: result %v, want %v", tc.name, cl.Result, tc.want)
		}
		if n := hook.N(); n != 1 {
			t.Errorf("%s: Claim took %d round trips, want 1", tc.name, n)
		}
	}
	if err := s.Finish(ctx, state.TaskRecord{ID: "t1", Owner: "a", Attempts: 1, Outcome: "succeeded"}, state.FinishExtras{}); err != nil {
		t.Fatal(err)
	}
	if cl := claim("t1", "b"); cl.Result != state.AlreadyDone {
		t.Errorf("after the finish: result %v, want AlreadyDone", cl.Result)
	}
	if n := hook.N(); n != 1 {
		t.Errorf("already done: Claim took %d round trips, want 1", n)
	}
	if ids, _ := s.InflightIDs(ctx, "b"); len(ids) != 0 {
		t.Errorf("in-flight of b, who never claimed = %v, want none", ids)
	}
	if ids, _ := s.InflightIDs(ctx, "a"); len(ids) != 1 || ids[0] != "warm" {
		t.Errorf("in-flight of a = %v, want [warm]", ids)
	}
}
