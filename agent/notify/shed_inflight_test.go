package notify

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestShedLeavesEntriesInFlight: an entry claimed and being sent when the
// lane passes its cap is not shed (its holder ends it: delivered, so never
// also dead-lettered); the next oldest go instead. An entry waiting for a
// retry can be shed, and its retry time goes with it; a Retry from a
// holder that comes back after that leaves no field behind.
func TestShedLeavesEntriesInFlight(t *testing.T) {
	ctx := context.Background()
	for name, open := range outboxes(t) {
		t.Run(name, func(t *testing.T) {
			o := open(t)
			var es []Entry
			for _, id := range []string{"a0", "a1", "a2", "a3", "a4", "a5"} {
				es = append(es, entry(id, "a"))
			}
			if _, err := o.Enqueue(ctx, es); err != nil {
				t.Fatal(err)
			}
			claimed := time.Now()
			got, err := o.Claim(ctx, "i-a", "a", 1, true)
			if err != nil || len(got) != 1 || got[0].ID != "a0" {
				t.Fatalf("Claim = %+v %v", got, err)
			}
			shed, err := o.Shed(ctx, "a", 100)
			if !inFlight(claimed) {
				t.Skip("the machine held the test past the claim idle time")
			}
			if err != nil || len(shed) != 2 || shed[0].ID != "a1" || shed[1].ID != "a2" {
				t.Fatalf("Shed = %+v %v, want a1, a2 (a0 is in flight)", shed, err)
			}
			if err := o.Ack(ctx, got[0]); err != nil {
				t.Fatal(err)
			}
			dead, _ := o.ListDead(ctx, 10)
			for _, d := range dead {
				if d.ID == "a0" {
					t.Fatalf("the delivered entry is dead-lettered too: %+v", dead)
				}
			}
			if len(dead) != 2 {
				t.Fatalf("dead = %+v, want a1, a2", dead)
			}

			// a3 fails and waits for its retry: it may be shed, and its
			// retry time goes with it.
			got, err = o.Claim(ctx, "i-a", "a", 1, true)
			if err != nil || len(got) != 1 || got[0].ID != "a3" {
				t.Fatalf("Claim = %+v %v", got, err)
			}
			if err := o.Retry(ctx, got[0], o.clock.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if retryFields(ctx, t, o) != 1 {
				t.Fatal("the retry time was not written")
			}
			if _, err := o.Enqueue(ctx, []Entry{entry("a6", "a"), entry("a7", "a")}); err != nil {
				t.Fatal(err)
			}
			shed, err = o.Shed(ctx, "a", 100)
			if err != nil || len(shed) != 1 || shed[0].ID != "a3" {
				t.Fatalf("Shed = %+v %v, want a3 (waiting for its retry)", shed, err)
			}
			if n := retryFields(ctx, t, o); n != 0 {
				t.Fatalf("%d retry fields after the shed, want 0", n)
			}
			if err := o.Retry(ctx, got[0], o.clock.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if n := retryFields(ctx, t, o); n != 0 {
				t.Fatalf("a Retry of a shed entry left %d retry fields, want 0", n)
			}
		})
	}
}

// retryFields is how many retry times the lane of sink a holds: the
// fields of its retry hash, or the memory outbox's scheduled entries.
func retryFields(ctx context.Context, t *testing.T, o outboxUnderTest) int64 {
	t.Helper()
	switch ob := o.Outbox.(type) {
	case *RedisOutbox:
		n, err := ob.c.(interface {
			HLen(ctx context.Context, key string) *redis.IntCmd
		}).HLen(ctx, ob.prefix+"retry:a").Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	case *MemoryOutbox:
		ob.mu.Lock()
		defer ob.mu.Unlock()
		var n int64
		for _, e := range ob.entries {
			if !e.retryAt.IsZero() {
				n++
			}
		}
		return n
	}
	t.Fatalf("unknown outbox %T", o.Outbox)
	return 0
}
