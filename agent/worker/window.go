package worker

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// slotPool is what the receiver takes its slots from: *window, or a
// plain *semaphore.Weighted in tests of the receiver alone.
type slotPool interface {
	Acquire(ctx context.Context, n int64) error
	TryAcquire(n int64) bool
	Release(n int64)
}

// rateInterval is how often the window measures the rate at which
// messages are received, from the receives that returned within it; a
// measure closes sooner, after rateInterval/5, once twice the window's
// limit and at least earlyMeasureBatches batches were received in it: a
// backlog that meets a resting window (a burst of alerts after a quiet
// hour) then grows it within tens of milliseconds instead of a
// quarter-second per step. Twice the limit takes a whole window's runs
// beyond the first fill, which tasks that run longer than rateInterval
// never reach; the batches keep a small window (a few workers) from
// sizing itself on a handful of messages that ended at once (denied
// tasks), whose rate over 50 ms says little.
const rateInterval = 250 * time.Millisecond

// earlyMeasureBatches is the fewest batches an early measure counts.
const earlyMeasureBatches = 4

// window is the receive window: the messages received ahead of the end of
// their run. It holds at most workers plus an extra of at least base
// (max(1, workers/4)). A receive takes a round trip, during which the
// workers go on taking messages at the rate they take them; so that a
// worker that frees up finds a message rather than a receive still on
// its way (Little's law), the extra grows to base plus the messages taken
// during one round trip (rate × round trip, at most workers). A receive
// also leaves only once it has gathered a batch of free slots
// (receiver.gather) while the workers still have work, and the slots it
// gathers feed no worker meanwhile: the extra holds that batch too, or a
// round trip's worth of messages where that is less (a gather stops
// waiting once the workers have nothing left to take). So the extra is
// at most base + workers + batch. Where a task runs far longer than a
// receive's round trip the product is below one and the window stays at
// workers + base; it grows only for tasks that end within a few round
// trips, and holds no more than about two round trips' worth of them
// beyond base.
type window struct {
	now func() time.Time
	// gauge shows the limit (autodiag_tasks_receive_window); nil = none.
	gauge prometheus.Gauge
	// workers, base and batch: the window is workers + extra, base ≤
	// extra ≤ base + workers + batch; batch is the most one receive asks
	// for.
	workers, base, batch int64

	mu    sync.Mutex
	held  int64
	limit int64
	// changed is closed (and replaced) whenever a slot is given back or
	// the limit grows.
	changed chan struct{}
	// epoch is when the current rate measurement began; count the
	// messages received since.
	epoch time.Time
	count int64
	// rtt is the shortest round trip of the interval's receives that came
	// back full: they met a backlog, where SQS answers at once; a long
	// poll that waited for messages is never shorter than a round trip,
	// so the shortest is the round trip itself.
	rtt time.Duration
}

// newWindow is the receive window of workers fed by receives of up to
// batch messages, starting at workers + max(1, workers/4); gauge, when not
// nil, follows its size.
func newWindow(workers, batch int64, now func() time.Time, gauge prometheus.Gauge) *window {
	base := max(1, workers/4)
	w := &window{now: now, gauge: gauge, workers: workers, base: base, batch: max(1, batch),
		limit: workers + base, changed: make(chan struct{})}
	w.show()
	return w
}

// show sets the gauge to the limit; with mu held or before w is shared.
func (w *window) show() {
	if w.gauge != nil {
		w.gauge.Set(float64(w.limit))
	}
}

// Acquire waits for n slots within the window, or returns ctx's error
// holding none.
func (w *window) Acquire(ctx context.Context, n int64) error {
	for {
		w.mu.Lock()
		if w.held+n <= w.limit {
			w.held += n
			w.mu.Unlock()
			return nil
		}
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TryAcquire takes n slots if they are free now.
func (w *window) TryAcquire(n int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held+n > w.limit {
		return false
	}
	w.held += n
	return true
}

// Release gives n slots back.
func (w *window) Release(n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held -= n
	if w.held < 0 {
		panic("worker: receive window released more than it held")
	}
	w.wakeLocked()
}

func (w *window) wakeLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// received records one receive: it took rtt and brought got messages,
// as many as it asked for when full. Once per rateInterval the window is
// sized again from the interval's rate of messages received and its
// round trip; an interval without a full receive met no backlog and
// sizes it back to workers + base.
func (w *window) received(rtt time.Duration, got int, full bool) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.epoch.IsZero() {
		w.epoch = now
	}
	w.count += int64(got)
	if full && got > 0 && (w.rtt == 0 || rtt < w.rtt) {
		w.rtt = rtt
	}
	elapsed := now.Sub(w.epoch)
	if elapsed < rateInterval && (elapsed < rateInterval/5 || w.count < max(2*w.limit, earlyMeasureBatches*w.batch)) {
		return
	}
	rate := float64(w.count) / elapsed.Seconds()
	trip := int64(math.Round(rate * w.rtt.Seconds()))
	extra := w.base + min(trip, w.workers) + min(trip, w.batch)
	w.epoch, w.count, w.rtt = now, 0, 0
	limit := w.workers + extra
	if limit == w.limit {
		return
	}
	grows := limit > w.limit
	// Shrinking takes effect as slots come back: none held is taken away.
	w.limit = limit
	w.show()
	if grows {
		w.wakeLocked()
	}
}

// receives is how many receives may be in flight at once while the queue
// has a backlog: enough batches to fill the workers, ceil(workers /
// batch), or, once the window has grown, its extra beyond the workers,
// ceil(extra / batch), so that the round trip's worth of messages and the
// batch gathered meanwhile are all on their way. A window at rest keeps
// the first: a small one (a few workers) then has one receive in flight,
// and does not take more of a quiet fleet's messages than its share.
func (w *window) receives() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(max(w.batches(w.workers), w.batches(w.limit-w.workers)))
}

// most is the most receives() answers: the window at its largest, whose
// extra (base + workers + batch) is more than the workers.
func (w *window) most() int { return int(w.batches(w.base + w.workers + w.batch)) }

// batches is how many receives n messages take, ceil(n / batch).
func (w *window) batches(n int64) int64 { return (n + w.batch - 1) / w.batch }

// size is the window's current limit and the slots held, for tests.
func (w *window) size() (limit, held int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.limit, w.held
}
