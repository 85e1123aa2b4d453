package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sync/semaphore"

	"github.com/autodiag/autodiag/agent/queue"
)

// windowRun drives a receiver with the receive window of workers over a
// backlog of n messages that each answer after rtt, each message then
// waiting for one of workers and running for run before its slot goes
// back (as the pipeline gives it back when the run ends). It returns the
// messages per second from the start to the last run's end, the most
// slots held at once, and the window's limit at the end.
func windowRun(t *testing.T, workers int64, n int, rtt, run time.Duration) (rate float64, peak, limit int64) {
	t.Helper()
	const batch = 10
	win := newWindow(workers, batch, time.Now, nil)
	src := &pollSource{rtt: rtt, left: n}
	busy := semaphore.NewWeighted(workers)
	var (
		tasks sync.WaitGroup
		mu    sync.Mutex
		done  int
		last  time.Time
	)
	in := &receiver{src: src, slots: win, observe: win.received, batch: batch,
		polls: win.most(), pollsNow: win.receives, log: slog.New(slog.DiscardHandler),
		accept: func(*queue.Message, func()) {
			// Receives in flight at once accept at once.
			mu.Lock()
			if _, held := win.size(); held > peak {
				peak = held
			}
			mu.Unlock()
			tasks.Go(func() {
				if err := busy.Acquire(context.Background(), 1); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(run)
				win.Release(1)
				busy.Release(1)
				mu.Lock()
				done++
				if done == n {
					last = time.Now()
				}
				mu.Unlock()
			})
		}}
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); in.run(ctx) }()
	for {
		time.Sleep(time.Second)
		mu.Lock()
		finished := done == n
		mu.Unlock()
		if finished {
			break
		}
	}
	cancel()
	<-stopped
	tasks.Wait()
	limit, held := win.size()
	if held != 0 {
		t.Errorf("%d slots still held after every run ended", held)
	}
	return float64(n) / last.Sub(start).Seconds(), peak, limit
}

// TestReceiveWindowGrowsForShortTasks: with a 10 ms receive and tasks of
// 5 ms on 16 workers, a window of workers + max(1, workers/4) = 20 would
// keep each slot for a round trip and a run, so at most 20 / 15 ms ≈ 1,333
// messages a second (Little's law) while the workers could take 3,200; the
// window grows by what arrives during a round trip, at most workers, and a
// batch, and the rate passes that bound.
func TestReceiveWindowGrowsForShortTasks(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const (
			workers = 16
			rtt     = 10 * time.Millisecond
			run     = 5 * time.Millisecond
			most    = workers + workers/4 + workers + 10 // + batch
		)
		fixed := float64(workers+max(1, workers/4)) / (rtt + run).Seconds()
		rate, peak, limit := windowRun(t, workers, 3000, rtt, run)
		t.Logf("%.0f messages/s (fixed window's bound %.0f), window %d, at most %d held", rate, fixed, limit, peak)
		if rate <= fixed*1.2 {
			t.Errorf("%.0f messages/s, want above the fixed window's bound %.0f by a fifth", rate, fixed)
		}
		if limit != most {
			t.Errorf("window %d at the end of a backlog of short tasks, want workers + base + workers + batch = %d", limit, most)
		}
		if peak > most {
			t.Errorf("%d slots held at once, above workers + base + workers + batch = %d", peak, most)
		}
	})
}

// TestReceiveWindowKeepsWorkersBusy: tasks that take as long as a receive's
// round trip (10 ms, as a CPU-bound agent's 16 workers take them in
// BenchmarkSQSIntake at 10 ms) keep the workers busy: the window holds,
// beyond the running tasks and base, one round trip's worth of messages
// and the batch a receive gathers before it leaves. Without the batch
// (at most 2 × workers) the receives lagged and the workers ran 83 % of
// the time.
func TestReceiveWindowKeepsWorkersBusy(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const (
			workers = 16
			rtt     = 10 * time.Millisecond
			run     = 10 * time.Millisecond
		)
		most := workers / run.Seconds()
		rate, peak, limit := windowRun(t, workers, 8000, rtt, run)
		t.Logf("%.0f messages/s of the workers' %.0f, window %d, at most %d held", rate, most, limit, peak)
		if rate < 0.9*most {
			t.Errorf("%.0f messages/s, want at least 90 %% of the workers' %.0f", rate, most)
		}
	})
}

// TestReceiveWindowStaysForLongTasks: tasks that run far longer than a
// receive's round trip keep the documented window, workers +
// max(1, workers/4): no more messages are held hidden from other agents.
// Where a round trip carries most of a message (tasks of a second on 16
// workers, 50 ms round trips: 0.8) it holds one more for the round trip
// and one for the gathered batch, not a whole batch.
func TestReceiveWindowStaysForLongTasks(t *testing.T) {
	t.Parallel()
	const (
		workers = 16
		base    = workers + workers/4
	)
	for _, tc := range []struct {
		rtt  time.Duration
		want int64
	}{
		{10 * time.Millisecond, base},
		{50 * time.Millisecond, base + 2},
	} {
		t.Run(tc.rtt.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, peak, limit := windowRun(t, workers, 400, tc.rtt, time.Second)
				if limit != tc.want {
					t.Errorf("window %d with tasks of a second, want %d", limit, tc.want)
				}
				if peak != tc.want {
					t.Errorf("%d slots held at most, want the whole window %d and no more", peak, tc.want)
				}
			})
		})
	}
}

// TestReceiveWindowShrinksAndBlocks: the window is sized once per
// rateInterval from the receives in it, and its gauge follows; grown by a
// fast backlog it holds workers + base + twice the round trip's messages,
// shrunk once the rate falls it takes no slot beyond the new limit until
// enough came back, and a wait for slots ends with its context, holding
// none.
func TestReceiveWindowShrinksAndBlocks(t *testing.T) {
	t.Parallel()
	const workers = 8
	now := time.Unix(0, 0)
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "autodiag_tasks_receive_window"})
	w := newWindow(workers, 10, func() time.Time { return now }, gauge)
	base := int64(workers + workers/4)
	grown := base + 8 + 8
	if limit, _ := w.size(); limit != base || testutil.ToFloat64(gauge) != float64(base) {
		t.Fatalf("new window %d, gauge %v, want %d", limit, testutil.ToFloat64(gauge), base)
	}
	// 10 full receives of 10 a rateInterval, 20 ms each: 400 a second ×
	// 20 ms = 8 more (at most workers), and as many for the gathered batch
	// (at most a batch).
	// It grows before the rateInterval is over, once twice its limit and
	// earlyMeasureBatches batches came in and rateInterval/5 passed: at the
	// fourth receive (40 messages, 75 ms), not at the third (30, 50 ms).
	for i := range 10 {
		w.received(20*time.Millisecond, 10, true)
		if limit, _ := w.size(); (i < 3 && limit != base) || (i == 3 && limit == base) {
			t.Fatalf("window %d after receive %d of a fast backlog, want %d only before the fourth", limit, i+1, base)
		}
		now = now.Add(rateInterval / 10)
	}
	w.received(20*time.Millisecond, 0, false)
	if limit, _ := w.size(); limit != grown || testutil.ToFloat64(gauge) != float64(grown) {
		t.Fatalf("window %d, gauge %v after a fast backlog, want %d", limit, testutil.ToFloat64(gauge), grown)
	}
	if !w.TryAcquire(grown) {
		t.Fatal("the grown window refused its own limit")
	}
	// A rateInterval with nothing received (after the one that ends the
	// backlog's last measure): back to the base window.
	now = now.Add(rateInterval)
	w.received(20*time.Millisecond, 0, false)
	now = now.Add(rateInterval)
	w.received(20*time.Millisecond, 0, false)
	if limit, held := w.size(); limit != base || held != grown || testutil.ToFloat64(gauge) != float64(base) {
		t.Fatalf("window %d holding %d, gauge %v after an empty interval, want %d holding %d", limit, held, testutil.ToFloat64(gauge), base, grown)
	}
	w.Release(grown - base - 2) // base + 2 still held
	if w.TryAcquire(1) {
		t.Fatal("a slot was taken while more than the shrunk window were held")
	}
	ctx, cancel := context.WithCancel(context.Background())
	acquired := make(chan error, 1)
	go func() { acquired <- w.Acquire(ctx, 1) }()
	w.Release(base + 2) // down to 0 held: the waiter gets its slot
	if err := <-acquired; err != nil {
		t.Fatalf("Acquire after slots came back: %v", err)
	}
	if !w.TryAcquire(base - 1) {
		t.Fatal("the rest of the window was not free")
	}
	go func() { acquired <- w.Acquire(ctx, 1) }()
	cancel()
	if err := <-acquired; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire on a full window with its context cancelled: %v, want context.Canceled", err)
	}
	if _, held := w.size(); held != base {
		t.Fatalf("%d held after a cancelled Acquire, want %d", held, base)
	}
}

// TestReceiveWindowSmallNotSizedOnAFew: a window of a few workers that
// received twice its limit within rateInterval/5 (six denied tasks that
// ended at once) is not sized on so few messages: the measure runs its
// rateInterval, as it did before measures could close early.
func TestReceiveWindowSmallNotSizedOnAFew(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	w := newWindow(2, 10, func() time.Time { return now }, nil)
	base, _ := w.size()
	w.received(20*time.Millisecond, 3, true)
	now = now.Add(rateInterval / 4)
	w.received(20*time.Millisecond, 3, true)
	if limit, _ := w.size(); limit != base {
		t.Fatalf("window %d after 6 messages in %s, want %d until the measure's rateInterval", limit, rateInterval/4, base)
	}
}

// TestReceiveWindowReceives: the receives in flight at once follow the
// window: enough batches for the workers at rest (one for a few
// workers), for the extra once it has grown.
func TestReceiveWindowReceives(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	small := newWindow(2, 10, func() time.Time { return now }, nil)
	if n := small.receives(); n != 1 {
		t.Errorf("a window of 2 workers at rest allows %d receives at once, want 1", n)
	}
	w := newWindow(16, 10, func() time.Time { return now }, nil)
	if n, most := w.receives(), w.most(); n != 2 || most != 3 {
		t.Errorf("a window of 16 workers at rest allows %d receives at once, at most %d; want 2, at most 3", n, most)
	}
	// A backlog of short tasks: 1,600 a second over 10 ms round trips
	// grows the extra to 4 + 16 + 10 = 30, three batches.
	for range 40 {
		w.received(10*time.Millisecond, 10, true)
		now = now.Add(rateInterval / 40)
	}
	w.received(10*time.Millisecond, 0, false)
	if limit, _ := w.size(); limit != 46 {
		t.Fatalf("window %d after the backlog, want 46", limit)
	}
	if n := w.receives(); n != 3 {
		t.Errorf("the grown window allows %d receives at once, want 3", n)
	}
}
