package limiter

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// pipelineCounter records the longest pipeline a client sends.
type pipelineCounter struct {
	longest atomic.Int64
}

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for {
			cur := p.longest.Load()
			if int64(len(cmds)) <= cur || p.longest.CompareAndSwap(cur, int64(len(cmds))) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestCoalescedBatch: decisions queued while the calls in flight are busy go
// out as ONE pipeline of one EVALSHA each (EVAL after a SCRIPT FLUSH), and
// every decision gets its own answer: host i has made i%7 decisions before,
// so its batched decision must report i%7+1 used. The batch's leader (the
// first queued) has its context cancelled meanwhile: that must not fail the
// batch, so no decision degrades.
func TestCoalescedBatch(t *testing.T) {
	const n = 64
	c := testRedisDirect(t)
	var pc pipelineCounter
	c.AddHook(&pc)
	b := NewRedis(c, uniquePrefix(t))
	if b.pipe == nil {
		t.Fatal("a client with ContextTimeoutEnabled is not called directly")
	}
	cfg := rules(Rule{Name: "default", Limits: []Limit{{Daily: 10}, {Window: &Window{Count: 10, Per: time.Minute}}}})
	l, err := New(cfg, b, Options{Clock: newFakeClock(t0), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	host := func(i int) Request {
		return Request{Host: fmt.Sprintf("web-%02d.example.com", i), Diagnostic: "disk-usage"}
	}
	for i := range n {
		for range i % 7 {
			if d, err := l.Allow(ctx, host(i)); err != nil || !d.Allowed {
				t.Fatalf("host %d, before: %+v %v", i, d, err)
			}
		}
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// Occupy every slot in flight, as calls that have not answered yet.
	b.co.mu.Lock()
	b.co.inFlight = maxInFlight
	b.co.mu.Unlock()
	decisions := make([]Decision, n)
	var wg sync.WaitGroup
	leaderCtx, cancelLeader := context.WithCancel(ctx)
	defer cancelLeader()
	decide := func(i int) {
		wg.Go(func() {
			dctx := ctx
			if i == 0 {
				dctx = leaderCtx
			}
			d, err := l.Allow(dctx, host(i))
			if err != nil {
				t.Errorf("host %d: %v", i, err)
			}
			decisions[i] = d
		})
	}
	waitQueued := func(want int) {
		for deadline := time.Now().Add(30 * time.Second); ; runtime.Gosched() {
			b.co.mu.Lock()
			queued := len(b.co.queue)
			b.co.mu.Unlock()
			if queued == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d decisions queued", queued, want)
			}
		}
	}
	decide(0)
	waitQueued(1)
	for i := 1; i < n; i++ {
		decide(i)
	}
	waitQueued(n)
	cancelLeader()
	for range maxInFlight {
		b.release() // the calls in flight answer: the queue goes out as one batch
	}
	wg.Wait()

	for i, d := range decisions {
		if want := i%7 + 1; !d.Allowed || d.Degraded || d.Counters.DailyUsed != want || d.Counters.WindowCount != want {
			t.Errorf("host %d: %s, want allowed with %d used", i, verdict(d), want)
		}
	}
	if got := pc.longest.Load(); got != n {
		t.Fatalf("longest pipeline: %d commands, want the %d queued decisions in one", got, n)
	}
	b.co.mu.Lock()
	defer b.co.mu.Unlock()
	if b.co.inFlight != 0 || len(b.co.queue) != 0 {
		t.Fatalf("after the decisions: %d in flight, %d queued, want none", b.co.inFlight, len(b.co.queue))
	}
}
