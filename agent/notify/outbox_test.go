package notify

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// testIdle is the claim idle time of the outboxes under test: short, so a
// takeover on Redis (whose idle clock is the server's) is quick to see,
// yet long enough for a loaded CI runner: the harness's sinks time out at
// a third of it (the least the dispatcher accepts is half), and a request
// to a loopback receiver cut by that timeout is one more failed try than
// a test scripts.
const testIdle = 1500 * time.Millisecond

// testMaxLen is the cap of the outboxes of the conformance tests.
const testMaxLen = 4

type outboxUnderTest struct {
	Outbox
	clock *clock.Manual
}

// outboxes are the implementations every conformance test runs against.
func outboxes(t *testing.T) map[string]func(t *testing.T) outboxUnderTest {
	return outboxesCapped(t, testMaxLen)
}

// outboxesCapped are the outboxes with each sink's lane capped at maxLen.
func outboxesCapped(_ *testing.T, maxLen int) map[string]func(t *testing.T) outboxUnderTest {
	return map[string]func(t *testing.T) outboxUnderTest{
		"memory": func(t *testing.T) outboxUnderTest {
			c := newFakeClock()
			return outboxUnderTest{NewMemoryOutbox(MemoryOptions{ClaimIdle: testIdle, DeadMax: 3, MaxLen: maxLen, Clock: c}), c}
		},
		"redis": func(t *testing.T) outboxUnderTest {
			c := newFakeClock()
			rc := testRedis(t)
			o := NewRedisOutbox(rc, RedisOptions{Prefix: testPrefix(t), ClaimIdle: testIdle, DeadMax: 3, MaxLen: int64(maxLen), Clock: c})
			t.Cleanup(func() { o.delKeys(rc) })
			return outboxUnderTest{o, c}
		},
		"redis-cluster": func(t *testing.T) outboxUnderTest {
			c := newFakeClock()
			rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
			t.Cleanup(func() { rc.Close() })
			o := NewRedisOutbox(rc, RedisOptions{Prefix: testPrefix(t), ClaimIdle: testIdle, DeadMax: 3, MaxLen: int64(maxLen), Clock: c})
			t.Cleanup(func() { o.delKeys(rc) })
			return outboxUnderTest{o, c}
		},
	}
}

func testRedis(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix keeps each test's keys apart on the shared server.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("notifytest:%s:%d:", t.Name(), time.Now().UnixNano())
}

// inFlight reports whether entries claimed no earlier than since are in
// flight for sure: the claim idle time has not passed on the wall clock,
// which Redis's idle time follows (the memory outbox's clock only moves
// when a test advances it). A check that a claimed entry is not handed out
// again holds only then; a loaded machine can hold a test back past it.
func inFlight(since time.Time) bool { return time.Since(since) < testIdle }

// claimAfterIdle claims for consumer once the claim idle time has passed:
// the memory outbox's clock is advanced, Redis's own clock is waited for.
func (o outboxUnderTest) claimAfterIdle(ctx context.Context, t *testing.T, consumer string, n int) []Delivery {
	t.Helper()
	o.clock.Add(testIdle)
	var got []Delivery
	waitFor(t, 20*testIdle, "a claim after the idle time", func() bool {
		var err error
		got, err = o.Claim(ctx, consumer, "a", n, true)
		if err != nil {
			t.Fatal(err)
		}
		return len(got) > 0
	})
	return got
}

func entry(id, sink string) Entry {
	return Entry{ID: id, Sink: sink, Event: EventFailed, Origin: "i-a",
		Time: time.UnixMilli(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixMilli()), Body: []byte(`{"delivery_id":"` + id + `"}`)}
}

func TestOutbox(t *testing.T) {
	ctx := context.Background()
	for name, open := range outboxes(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("claim, ack", func(t *testing.T) {
				o := open(t)
				refs, err := o.Enqueue(ctx, []Entry{entry("e1", "a"), entry("e1", "b"), entry("e2", "a")})
				if err != nil || len(refs) != 3 {
					t.Fatalf("Enqueue: %v %v", refs, err)
				}
				na, _ := o.Pending(ctx, "a")
				nb, _ := o.Pending(ctx, "b")
				if na != 2 || nb != 1 {
					t.Fatalf("Pending = %d, %d; want 2 of sink a, 1 of b", na, nb)
				}
				claimed := time.Now()
				got, err := o.Claim(ctx, "i-a", "a", 3, true)
				if err != nil || len(got) != 2 {
					t.Fatalf("Claim: %v %v", got, err)
				}
				if got[0].ID != "e1" || got[0].Sink != "a" || got[0].Attempt != 1 || string(got[0].Body) != `{"delivery_id":"e1"}` ||
					!got[0].Time.Equal(entry("e1", "a").Time) || got[0].Origin != "i-a" || got[0].Event != EventFailed {
					t.Errorf("first claim = %+v", got[0])
				}
				if got[1].ID != "e2" || got[1].Sink != "a" {
					t.Errorf("second of the claim = %+v", got[1])
				}
				rest, _ := o.Claim(ctx, "i-b", "b", 5, true)
				if len(rest) != 1 || rest[0].ID != "e1" || rest[0].Sink != "b" {
					t.Fatalf("second consumer got %+v", rest)
				}
				if none, _ := o.Claim(ctx, "i-b", "a", 5, true); len(none) != 0 && inFlight(claimed) {
					t.Fatalf("a claimed entry was handed out again: %+v", none)
				}
				for _, d := range append(got, rest...) {
					if err := o.Ack(ctx, d); err != nil {
						t.Fatal(err)
					}
				}
				if n, _ := o.Pending(ctx, "a"); n != 0 {
					t.Fatalf("Pending after acks = %d", n)
				}
			})
			t.Run("takeover after idle", func(t *testing.T) {
				o := open(t)
				if _, err := o.Enqueue(ctx, []Entry{entry("e1", "a")}); err != nil {
					t.Fatal(err)
				}
				claimed := time.Now()
				held, _ := o.Claim(ctx, "i-dead", "a", 1, true)
				if len(held) != 1 {
					t.Fatal("nothing claimed")
				}
				got, _ := o.Claim(ctx, "i-b", "a", 1, true)
				if len(got) != 0 && inFlight(claimed) {
					t.Fatal("an entry in flight was taken over at once")
				}
				if len(got) == 0 {
					got = o.claimAfterIdle(ctx, t, "i-b", 1)
				}
				if got[0].ID != "e1" || got[0].Attempt != 2 {
					t.Fatalf("takeover = %+v", got[0])
				}
				if err := o.Ack(ctx, got[0]); err != nil {
					t.Fatal(err)
				}
			})
			t.Run("retry when due, not before", func(t *testing.T) {
				o := open(t)
				if _, err := o.Enqueue(ctx, []Entry{entry("e1", "a")}); err != nil {
					t.Fatal(err)
				}
				d, _ := o.Claim(ctx, "i-a", "a", 1, true)
				if err := o.Retry(ctx, d[0], o.clock.Now().Add(time.Hour)); err != nil {
					t.Fatal(err)
				}
				if got, _ := o.Claim(ctx, "i-b", "a", 1, true); len(got) != 0 {
					t.Fatal("retried before it was due")
				}
				o.clock.Add(time.Hour)
				claimed := time.Now()
				got, err := o.Claim(ctx, "i-b", "a", 1, true)
				if err != nil || len(got) != 1 || got[0].Attempt != 2 || got[0].ID != "e1" {
					t.Fatalf("due retry: %+v %v", got, err)
				}
				// Claimed again, it is in flight: no one else takes it.
				if again, _ := o.Claim(ctx, "i-c", "a", 1, true); len(again) != 0 && inFlight(claimed) {
					t.Fatal("a claimed retry was handed out twice")
				}
			})
			t.Run("no new work when draining", func(t *testing.T) {
				o := open(t)
				if _, err := o.Enqueue(ctx, []Entry{entry("e1", "a")}); err != nil {
					t.Fatal(err)
				}
				if got, _ := o.Claim(ctx, "i-a", "a", 1, false); len(got) != 0 {
					t.Fatal("new work claimed with newWork=false")
				}
			})
			t.Run("one sink's retries and backlog never hold another's entries back", func(t *testing.T) {
				o := open(t)
				for i := range 4 {
					if _, err := o.Enqueue(ctx, []Entry{entry(fmt.Sprint("slow", i), "slow")}); err != nil {
						t.Fatal(err)
					}
				}
				held, _ := o.Claim(ctx, "i-a", "slow", 2, true)
				for _, d := range held {
					if err := o.Retry(ctx, d, o.clock.Now()); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := o.Enqueue(ctx, []Entry{entry("fast0", "fast")}); err != nil {
					t.Fatal(err)
				}
				got, err := o.Claim(ctx, "i-a", "fast", 4, true)
				if err != nil || len(got) != 1 || got[0].ID != "fast0" {
					t.Fatalf("claim of sink fast = %+v %v, want only fast0", got, err)
				}
			})
			t.Run("shed past the cap, oldest first, to the dead list", func(t *testing.T) {
				o := open(t)
				max := o.MaxLen()
				if max != testMaxLen {
					t.Fatalf("MaxLen = %d, want %d", max, testMaxLen)
				}
				var all []Entry
				for i := range testMaxLen + 3 {
					all = append(all, entry(fmt.Sprint("a", i), "a"))
				}
				if _, err := o.Enqueue(ctx, append(all, entry("b0", "b"))); err != nil {
					t.Fatal(err)
				}
				if d, _ := o.Shed(ctx, "b", 100); len(d) != 0 {
					t.Fatalf("shed of a sink under its cap: %+v", d)
				}
				first, err := o.Shed(ctx, "a", 2)
				if err != nil || len(first) != 2 || first[0].ID != "a0" || first[1].ID != "a1" || first[0].Reason != ReasonOutboxFull {
					t.Fatalf("Shed(limit 2) = %+v %v, want a0, a1 with reason %s", first, err, ReasonOutboxFull)
				}
				rest, _ := o.Shed(ctx, "a", 100)
				if len(rest) != 1 || rest[0].ID != "a2" {
					t.Fatalf("second Shed = %+v, want a2", rest)
				}
				if n, _ := o.Pending(ctx, "a"); n != testMaxLen {
					t.Fatalf("Pending after shed = %d, want the cap %d", n, testMaxLen)
				}
				dead, _ := o.ListDead(ctx, 10)
				if len(dead) != 3 || dead[0].ID != "a2" || dead[0].Reason != ReasonOutboxFull || dead[0].Sink != "a" ||
					string(dead[0].Body) != `{"delivery_id":"a2"}` {
					t.Fatalf("dead list = %+v", dead)
				}
				got, _ := o.Claim(ctx, "i-a", "a", 100, true)
				if len(got) != testMaxLen || got[0].ID != "a3" {
					t.Fatalf("claim after shed: %d entries, first %+v", len(got), got[0])
				}
			})
			t.Run("dead, list, requeue", func(t *testing.T) {
				o := open(t)
				for i := range 5 {
					if _, err := o.Enqueue(ctx, []Entry{entry(fmt.Sprint("e", i), "a")}); err != nil {
						t.Fatal(err)
					}
				}
				ds, _ := o.Claim(ctx, "i-a", "a", 5, true)
				for _, d := range ds {
					if err := o.Dead(ctx, d, "status_400"); err != nil {
						t.Fatal(err)
					}
				}
				if n, _ := o.Pending(ctx, "a"); n != 0 {
					t.Fatalf("Pending = %d after dead-lettering all", n)
				}
				dead, err := o.ListDead(ctx, 10)
				if err != nil || len(dead) == 0 || len(dead) > 5 {
					t.Fatalf("ListDead: %d %v", len(dead), err)
				}
				if dead[0].ID != "e4" || dead[0].Reason != "status_400" || dead[0].Attempts != 1 {
					t.Errorf("newest dead = %+v", dead[0])
				}
				n, err := o.Requeue(ctx, []string{dead[0].Ref, "0-1"})
				if err != nil || n != 1 {
					t.Fatalf("Requeue: %d %v", n, err)
				}
				got, _ := o.Claim(ctx, "i-a", "a", 5, true)
				if len(got) != 1 || got[0].ID != "e4" || string(got[0].Body) != `{"delivery_id":"e4"}` {
					t.Fatalf("requeued entry: %+v", got)
				}
			})
		})
	}
}

// Redis restarted empty (here: the outbox's keys removed) mid-run: the
// claim says so once, and the outbox works again.
func TestRedisOutboxReset(t *testing.T) {
	ctx := context.Background()
	c := testRedis(t)
	o := NewRedisOutbox(c, RedisOptions{Prefix: testPrefix(t), ClaimIdle: testIdle})
	if _, err := o.Enqueue(ctx, []Entry{entry("e1", "a")}); err != nil {
		t.Fatal(err)
	}
	if got, err := o.Claim(ctx, "i-a", "a", 1, true); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	if err := c.Del(ctx, o.queue("a").Stream(), o.prefix+"retry:a").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Claim(ctx, "i-a", "a", 1, true); !errors.Is(err, ErrReset) {
		t.Fatalf("claim after the keys vanished: %v", err)
	}
	if _, err := o.Enqueue(ctx, []Entry{entry("e2", "a")}); err != nil {
		t.Fatal(err)
	}
	if got, err := o.Claim(ctx, "i-a", "a", 1, true); err != nil || len(got) != 1 || got[0].ID != "e2" {
		t.Fatalf("claim after the reset: %v %v", got, err)
	}
}
