package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/internal/streamq"
)

// Two agents share a Redis outbox; the receiver fails three times, then
// takes the event: it is delivered once, every try with the same id,
// whichever agent made it.
func TestRedisDispatchersDeliverAtLeastOnce(t *testing.T) {
	rc := testRedis(t)
	prefix := testPrefix(t)
	clock := newFakeClock()
	outbox := func() *RedisOutbox {
		return NewRedisOutbox(rc, RedisOptions{Prefix: prefix, ClaimIdle: testIdle, Clock: clock})
	}
	o := Options{BackoffBase: time.Second, BackoffMax: time.Minute}
	a := newHarness(t, outbox(), clock, "i-a", o, 500, 500, 500, 200)
	b := newHarness(t, outbox(), clock, "i-b", o)
	// Both agents post to the same receiver.
	b.d.sinks["hook"].(*Webhook).url = a.rcv.URL
	t.Cleanup(func() { outbox().delKeys(rc) })
	runDispatcher(t, a.d)
	runDispatcher(t, b.d)

	id, err := a.d.Enqueue(context.Background(), failedEvent())
	if err != nil {
		t.Fatal(err)
	}
	retries := func() float64 { return a.count(ResultRetry) + b.count(ResultRetry) }
	for try := 1; try <= 3; try++ {
		waitFor(t, 5*time.Second, "a failed try", func() bool { return retries() == float64(try) })
		clock.Add(time.Second << (try - 1))
	}
	waitFor(t, 5*time.Second, "delivered", func() bool { return a.count(ResultDelivered)+b.count(ResultDelivered) == 1 })
	reqs := a.rcv.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	for _, r := range reqs {
		if r.header.Get(HeaderDelivery) != id {
			t.Fatalf("delivery id %q, want %q on every try", r.header.Get(HeaderDelivery), id)
		}
	}
	waitFor(t, 5*time.Second, "outbox empty", func() bool { n, _ := outbox().Pending(context.Background(), "hook"); return n == 0 })
}

// The agent holding a delivery goes away mid-request (its Stop deadline
// cuts the request; the entry stays pending under it); another agent takes
// the entry over once it has been idle for the claim idle time.
func TestRedisDispatcherTakeover(t *testing.T) {
	rc := testRedis(t)
	prefix := testPrefix(t)
	clock := newFakeClock()
	outbox := func() *RedisOutbox {
		return NewRedisOutbox(rc, RedisOptions{Prefix: prefix, ClaimIdle: testIdle, Clock: clock})
	}
	t.Cleanup(func() { outbox().delKeys(rc) })
	a := newHarness(t, outbox(), clock, "i-a", Options{})
	a.rcv.hang = make(chan struct{})
	defer close(a.rcv.hang)
	done := make(chan error, 1)
	go func() { done <- a.d.Run(context.Background()) }()
	id, err := a.d.Enqueue(context.Background(), failedEvent())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "agent a's request", func() bool { return len(a.rcv.requests()) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := a.d.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	a.rcv.answerNow()

	// The entry has been idle since agent a's claim, not since b starts:
	// the setup above can take longer than the claim idle time on a
	// loaded machine. Redis says how long; the claim is due no earlier
	// than asked - idle + testIdle (idle in whole ms).
	asked := time.Now()
	pend, err := rc.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: outbox().queue("hook").Stream(), Group: streamq.Group,
		Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(pend) != 1 || pend[0].Consumer != "i-a" {
		t.Fatalf("pending before the takeover: %+v %v, want the entry under i-a", pend, err)
	}
	due := asked.Add(testIdle - pend[0].Idle)
	b := newHarness(t, outbox(), clock, "i-b", Options{})
	b.d.sinks["hook"].(*Webhook).url = a.rcv.URL
	runDispatcher(t, b.d)
	waitFor(t, 20*testIdle, "agent b takes over", func() bool { return b.count(ResultDelivered) == 1 })
	if early := time.Until(due); early > time.Millisecond { // idle is whole ms
		t.Errorf("taken over %s before the entry was idle for the claim idle time %s", early, testIdle)
	}
	reqs := a.rcv.requests()
	if len(reqs) != 2 || reqs[1].header.Get(HeaderDelivery) != id {
		t.Fatalf("requests: %d, ids %q", len(reqs), reqs[len(reqs)-1].header.Get(HeaderDelivery))
	}
}

// Redis restarted empty mid-run: no crash, the loss is counted, and
// events written afterwards are delivered.
func TestRedisDispatcherSurvivesReset(t *testing.T) {
	rc := testRedis(t)
	clock := newFakeClock()
	ob := NewRedisOutbox(rc, RedisOptions{Prefix: testPrefix(t), ClaimIdle: testIdle, Clock: clock})
	t.Cleanup(func() { ob.delKeys(rc) })
	h := newHarness(t, ob, clock, "i-a", Options{})
	runDispatcher(t, h.d)
	if _, err := h.d.Enqueue(context.Background(), failedEvent()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "first delivery", func() bool { return h.count(ResultDelivered) == 1 })
	if err := rc.Del(context.Background(), ob.queue("hook").Stream()).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the reset counted", func() bool { return testutilCounter(h.d.m.resets) == 1 })
	if _, err := h.d.Enqueue(context.Background(), failedEvent()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "delivery after the reset", func() bool { return h.count(ResultDelivered) == 2 })
}

// Two agents race for a due entry; the winner's try fails at once and it
// schedules the retry an hour ahead. The loser never gets the entry in
// between, however their calls interleave: the due check and the claim
// are one step, so the winner's Retry (which makes the entry idle enough
// to claim and sets its retry time) cannot fall between them.
func TestRedisRetryNeverClaimedBeforeDue(t *testing.T) {
	ctx := context.Background()
	rc := testRedis(t)
	prefix := testPrefix(t)
	clock := newFakeClock()
	agents := map[string]*RedisOutbox{}
	for _, name := range []string{"i-a", "i-b"} {
		agents[name] = NewRedisOutbox(rc, RedisOptions{Prefix: prefix, ClaimIdle: testIdle, Clock: clock})
	}
	a := agents["i-a"]
	t.Cleanup(func() { a.delKeys(rc) })
	const rounds = 300
	for i := range rounds {
		if _, err := a.Enqueue(ctx, []Entry{entry(fmt.Sprint(i), "hook")}); err != nil {
			t.Fatal(err)
		}
		first, err := a.Claim(ctx, "i-a", "hook", 1, true)
		if err != nil || len(first) != 1 {
			t.Fatalf("round %d: first claim = %v, %v", i, first, err)
		}
		// The first try failed; its retry is due at once, for either agent.
		if err := a.Retry(ctx, first[0], clock.Now()); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var won []Delivery
		var wg sync.WaitGroup
		for name, o := range agents {
			wg.Go(func() {
				got, err := o.Claim(ctx, name, "hook", 1, false)
				if err != nil {
					t.Error(err)
				}
				for _, d := range got {
					if err := o.Retry(ctx, d, clock.Now().Add(time.Hour)); err != nil {
						t.Error(err)
					}
				}
				mu.Lock()
				won = append(won, got...)
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("round %d: the due entry was claimed %d times, want once (the retry an hour ahead holds it back)", i, len(won))
		}
		if err := a.Ack(ctx, won[0]); err != nil {
			t.Fatal(err)
		}
	}
}

// Entries an earlier version wrote to the single outbox stream are moved
// into their sinks' lanes and delivered; an entry of a sink this agent
// does not have stays for one that has it.
func TestRedisLegacyOutboxMigrated(t *testing.T) {
	rc := testRedis(t)
	prefix := testPrefix(t)
	clock := newFakeClock()
	ob := NewRedisOutbox(rc, RedisOptions{Prefix: prefix, ClaimIdle: testIdle, Clock: clock})
	legacy := prefix + "{notify}:outbox"
	t.Cleanup(func() { ob.delKeys(rc); rc.Del(context.Background(), legacy, prefix+"{notify}:retry") })
	h := newHarness(t, ob, clock, "i-a", Options{})
	for _, e := range []Entry{entry("old-1", "hook"), entry("old-2", "other"), entry("old-3", "hook")} {
		e.Time = clock.Now()
		if err := rc.XAdd(context.Background(), &redis.XAddArgs{Stream: legacy, Values: entryValues(e)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	runDispatcher(t, h.d)
	waitFor(t, 5*time.Second, "both hook entries delivered", func() bool { return h.count(ResultDelivered) == 2 })
	ids := map[string]bool{}
	for _, r := range h.rcv.requests() {
		ids[r.header.Get(HeaderDelivery)] = true
	}
	if !ids["old-1"] || !ids["old-3"] {
		t.Errorf("delivered %v, want old-1 and old-3", ids)
	}
	left, err := rc.XRange(context.Background(), legacy, "-", "+").Result()
	if err != nil || len(left) != 1 || left[0].Values["id"] != "old-2" {
		t.Errorf("earlier stream holds %v (%v), want only old-2 of sink other", left, err)
	}
}
