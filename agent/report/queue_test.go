package report

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/internal/streamq"
	"github.com/autodiag/autodiag/internal/testenv"
)

// queueConformance is what every Queue does. lease is the queue's lease;
// the takeover case waits for it on the wall clock.
func queueConformance(t *testing.T, q Queue, lease time.Duration) {
	ctx := context.Background()
	if _, ok, err := q.Claim(ctx, "a"); ok || err != nil {
		t.Fatalf("empty queue: ok %v err %v", ok, err)
	}
	j := job("t1")
	j.EnqueuedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := q.Enqueue(ctx, j); err != nil {
		t.Fatal(err)
	}
	claimed := time.Now()
	c, ok, err := q.Claim(ctx, "a")
	if !ok || err != nil || c.ID != "t1" || c.Attempt != 1 || !c.EnqueuedAt.Equal(j.EnqueuedAt) ||
		c.Evidence.Output != j.Evidence.Output || *c.Evidence.ExitCode != 1 || c.Evidence.Duration != j.Evidence.Duration {
		t.Fatalf("claim: %+v ok %v err %v", c, ok, err)
	}
	// Only a claim that the wall clock puts inside the lease is wrong: a
	// loaded machine can hold this goroutine back past a short lease
	// between the two calls.
	if _, ok, _ := q.Claim(ctx, "b"); ok && time.Since(claimed) < lease {
		t.Fatal("a claimed job was claimed again within its lease")
	}
	if n, _ := q.Len(ctx); n != 1 {
		t.Fatalf("Len %d", n)
	}
	// Takeover: a holder that died.
	deadline := time.Now().Add(lease + 5*time.Second)
	var c2 Claimed
	for {
		c2, ok, err = q.Claim(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a job whose lease ended was not taken over")
		}
		time.Sleep(lease / 4) // polling the lease's end
	}
	if c2.ID != "t1" || c2.Attempt < 2 {
		t.Fatalf("takeover %+v", c2)
	}
	if err := q.Ack(ctx, c2); err != nil {
		t.Fatal(err)
	}
	if n, _ := q.Len(ctx); n != 0 {
		t.Fatalf("Len after ack %d", n)
	}
	if err := q.Ack(ctx, c); err == nil {
		t.Fatal("a second ack of a finished job is not ErrGone")
	}
}

func TestMemoryQueue(t *testing.T) {
	queueConformance(t, NewMemoryQueue(50*time.Millisecond, nil), 50*time.Millisecond)
}

// TestRedisQueue runs the conformance suite on a standalone Redis and on
// a Cluster.
func TestRedisQueue(t *testing.T) {
	const lease = 100 * time.Millisecond
	for name, open := range map[string]func(t *testing.T) redis.UniversalClient{
		"standalone": func(t *testing.T) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
		},
		"cluster": func(t *testing.T) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := open(t)
			defer c.Close()
			prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
			queueConformance(t, NewRedisQueue(c, prefix, lease), lease)
		})
	}
}

// TestRedisQueueRecreated: Redis restarted empty; the queue makes its
// group again and goes on.
func TestRedisQueueRecreated(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer c.Close()
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	q := NewRedisQueue(c, prefix, 0)
	ctx := context.Background()
	if _, _, err := q.Claim(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	c.Del(ctx, prefix+"{report}:jobs")
	if err := q.Enqueue(ctx, job("t1")); err != nil {
		t.Fatal(err)
	}
	// The XADD made the stream anew without the group.
	if c, ok, err := q.Claim(ctx, "a"); err != nil || !ok || c.ID != "t1" {
		t.Fatalf("claim after reset: %+v %v %v", c, ok, err)
	}
}

// TestReporterOnRedisQueue: the worker path end to end on the fleet queue.
func TestReporterOnRedisQueue(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer c.Close()
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	h := newHarness(t, NewRedisQueue(c, prefix, 0), nil)
	if err := h.r.Enqueue(context.Background(), job("t1")); err != nil {
		t.Fatal(err)
	}
	if r := h.sink.next(t, wait); r.Status != StatusOK {
		t.Fatalf("report %+v", r)
	}
	waitLen(t, h.q, 0)
}

// TestRedisQueueTakeoverBehindLiveJobs: a dead holder's job behind more
// live jobs than one scan of the pending list returns (streamq scans 256)
// is taken over by the next claim: the scan asks Redis only for entries
// idle past the lease, so live ones never stand in front of it.
//
// The live jobs were claimed a moment ago and the lease is a minute, so
// they stay live however slow the machine; the dead holder's job is made
// to look idle for two leases (XCLAIM IDLE) rather than waited for.
func TestRedisQueueTakeoverBehindLiveJobs(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer c.Close()
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	const lease = time.Minute
	q := NewRedisQueue(c, prefix, lease)
	ctx := context.Background()
	const live = 300
	for i := range live + 1 {
		if err := q.Enqueue(ctx, job(fmt.Sprint("t", i))); err != nil {
			t.Fatal(err)
		}
	}
	for range live {
		if _, ok, err := q.Claim(ctx, "alive"); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	dead, ok, err := q.Claim(ctx, "dies")
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if err := c.Do(ctx, "XCLAIM", q.q.Stream(), streamq.Group, "dies", 0, dead.ref,
		"IDLE", (2 * lease).Milliseconds(), "JUSTID").Err(); err != nil {
		t.Fatal(err)
	}
	got, ok, err := q.Claim(ctx, "b")
	if err != nil || !ok {
		t.Fatalf("the dead holder's job was not taken over: ok %v err %v", ok, err)
	}
	if got.ID != fmt.Sprint("t", live) || got.Attempt != 2 {
		t.Fatalf("took over %s attempt %d, want t%d attempt 2", got.ID, got.Attempt, live)
	}
}

// TestRedisQueueShedsPastTheCap: the oldest jobs past the cap leave the
// stream, at most limit per call, and come back to the caller (a claimed
// one too: its holder's ack then finds it gone); nothing is trimmed
// unseen.
func TestRedisQueueShedsPastTheCap(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer c.Close()
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	q := NewRedisQueue(c, prefix, time.Minute)
	q.maxLen = 5
	ctx := context.Background()
	const jobs = 8
	for i := range jobs {
		if err := q.Enqueue(ctx, job(fmt.Sprint("t", i))); err != nil {
			t.Fatal(err)
		}
	}
	held, ok, err := q.Claim(ctx, "a")
	if !ok || err != nil || held.ID != "t0" {
		t.Fatalf("claim: %+v %v %v", held, ok, err)
	}
	var shed []string
	for _, limit := range []int{2, 100, 100} {
		got, err := q.Shed(ctx, limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) > limit {
			t.Fatalf("Shed(%d) returned %d jobs", limit, len(got))
		}
		for _, j := range got {
			if j.Evidence.Host != evidence().Host {
				t.Errorf("shed job %s without its evidence: %+v", j.ID, j)
			}
			shed = append(shed, j.ID)
		}
	}
	// t0 is in flight (claimed, within its lease): it is left to its
	// holder, and the oldest after it go instead.
	if fmt.Sprint(shed) != "[t1 t2 t3]" {
		t.Errorf("shed %v, want the %d oldest not in flight [t1 t2 t3]", shed, jobs-int(q.maxLen))
	}
	if n, err := q.Len(ctx); err != nil || n != q.maxLen {
		t.Errorf("Len %d %v, want the cap %d", n, err, q.maxLen)
	}
	if err := q.Ack(ctx, held); err != nil {
		t.Errorf("ack of the job in flight: %v, want it still held", err)
	}
}

// TestReporterSkipsJobsPastTheCap: jobs past the fleet queue's cap end
// `skipped` with ReasonQueueFull, are counted and reach the Sink (the
// task's record), before the worker takes the jobs within the cap.
func TestReporterSkipsJobsPastTheCap(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer c.Close()
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	q := NewRedisQueue(c, prefix, 0)
	q.maxLen = 2
	const jobs = 5
	for i := range jobs {
		if err := q.Enqueue(context.Background(), job(fmt.Sprint("t", i))); err != nil {
			t.Fatal(err)
		}
	}
	h := newHarness(t, q, nil)
	for i := range jobs {
		r := h.sink.next(t, wait)
		if skipped := i < jobs-int(q.maxLen); skipped != (r.Status == StatusSkipped && r.Reason == ReasonQueueFull) {
			t.Errorf("result %d: %s %q, want skipped for queue full: %v", i, r.Status, r.Reason, skipped)
		}
	}
	if got := testutil.ToFloat64(h.r.m.reports.WithLabelValues(ProviderOpenAI, StatusSkipped)); got != jobs-float64(q.maxLen) {
		t.Errorf("reports_total skipped = %g, want %d", got, jobs-q.maxLen)
	}
	waitLen(t, q, 0)
}
