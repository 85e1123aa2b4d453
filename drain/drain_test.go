package drain

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestStateString(t *testing.T) {
	t.Parallel()
	for s, want := range map[State]string{Running: "running", Draining: "draining", Drained: "drained"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	err := Config{Timeout: -1, Queued: "later"}.Validate()
	if err == nil {
		t.Fatal("Validate accepted a negative timeout and an unknown queued policy")
	}
	for _, key := range []string{"drain_timeout:", "queued:"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error %q does not name %s", err, key)
		}
	}
	if err := (Config{Timeout: time.Minute, Queued: QueuedRelease}).Validate(); err != nil {
		t.Errorf("valid config rejected: %v", err)
	}
}

// TestFinishWaitsForReceivedWork: queued work started after the trigger
// still runs under queued=finish, and Wait returns only when all is done.
func TestFinishWaitsForReceivedWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := New(Config{Timeout: time.Minute})
		var released atomic.Int32
		running := c.Track(func() { released.Add(1) })
		queued := c.Track(func() { released.Add(1) })
		if !running.Start(func() {}) {
			t.Fatal("Start refused before any drain")
		}
		if !c.Start(Trigger{Source: "signal"}) {
			t.Fatal("first Start returned false")
		}
		if c.Start(Trigger{Source: "admin"}) {
			t.Fatal("second Start returned true")
		}
		select {
		case <-c.Draining():
		default:
			t.Fatal("Draining not closed after Start")
		}
		waited := make(chan error, 1)
		go func() { waited <- c.Wait(context.Background()) }()

		time.Sleep(10 * time.Second) // simulated time: work in progress
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("Wait returned %v with work remaining", err)
		default:
		}
		if p := c.Progress(); p.Queued != 1 || p.Running != 1 || p.Remaining() != 2 || p.Source != "signal" {
			t.Fatalf("progress = %+v", p)
		}
		running.Done()
		if !queued.Start(func() {}) {
			t.Fatal("queued=finish refused to start received work during the drain")
		}
		queued.Done()
		if err := <-waited; err != nil {
			t.Fatalf("Wait = %v", err)
		}
		if released.Load() != 0 {
			t.Fatalf("released %d items under queued=finish", released.Load())
		}
		p := c.Progress()
		if p.EndedAt.IsZero() || p.TimedOut {
			t.Fatalf("progress after work = %+v", p)
		}
		if !c.Finish() || c.State() != Drained {
			t.Fatalf("Finish did not reach Drained: %v", c.State())
		}
	})
}

func TestReleasePolicyHandsBackUnstarted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := New(Config{Timeout: time.Minute, Queued: QueuedRelease})
		var released atomic.Int32
		run := c.Track(func() { released.Add(1) })
		run.Start(func() {})
		q := c.Track(func() { released.Add(1) })
		c.Start(Trigger{Source: "imds"})
		if released.Load() != 1 {
			t.Fatalf("released = %d, want 1 (the unstarted item)", released.Load())
		}
		if q.Start(func() {}) {
			t.Fatal("a released item was allowed to start")
		}
		late := c.Track(func() { released.Add(1) })
		if released.Load() != 2 || late.Start(func() {}) {
			t.Fatal("work tracked during a release drain was not released at once")
		}
		run.Done()
		if err := c.Wait(context.Background()); err != nil {
			t.Fatalf("Wait = %v", err)
		}
		if p := c.Progress(); p.Released != 2 {
			t.Fatalf("progress.Released = %d, want 2", p.Released)
		}
	})
}

// TestHandedBackCountsAsReleased: work its worker gives back to the queue
// during a drain (a running task cancelled by a second signal's fast
// exit) counts in Progress.Released, as the drain's own releases do, so
// "drain work ended" agrees with the tasks' released outcomes; the same
// outside a drain counts nothing, and work the drain released is counted
// once.
func TestHandedBackCountsAsReleased(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := New(Config{Timeout: time.Minute, Queued: QueuedRelease})
		before := c.Track(nil)
		before.Start(func() {})
		before.HandedBack()
		before.Done()
		run := c.Track(nil)
		run.Start(func() {})
		queued := c.Track(nil)
		c.Start(Trigger{Source: "signal"})
		queued.HandedBack() // the drain released it already
		queued.Done()
		run.HandedBack()
		run.Done()
		if err := c.Wait(context.Background()); err != nil {
			t.Fatalf("Wait = %v", err)
		}
		if p := c.Progress(); p.Released != 2 {
			t.Fatalf("progress.Released = %d, want 2 (the queued item the drain released, the running one its worker gave back)", p.Released)
		}
	})
}

func TestDeadlineReleasesAndCancels(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := New(Config{Timeout: time.Minute, CancelGrace: 5 * time.Second})
		var released, cancelled atomic.Int32
		run := c.Track(func() { released.Add(1) })
		ctx, cancel := context.WithCancel(context.Background())
		run.Start(func() { cancelled.Add(1); cancel() })
		queued := c.Track(func() { released.Add(1) })
		// The running work ends when cancelled, like a killed process group.
		go func() { <-ctx.Done(); run.Done() }()

		start := time.Now()
		c.Start(Trigger{Source: "signal"})
		err := c.Wait(context.Background())
		if !errors.Is(err, ErrTimedOut) {
			t.Fatalf("Wait = %v, want ErrTimedOut", err)
		}
		if got := time.Since(start); got != time.Minute {
			t.Fatalf("drain ended after %v, want exactly the 1m deadline", got)
		}
		if released.Load() != 1 || cancelled.Load() != 1 {
			t.Fatalf("released=%d cancelled=%d, want 1 and 1", released.Load(), cancelled.Load())
		}
		if queued.Start(func() {}) {
			t.Fatal("work released at the deadline was allowed to start")
		}
		if p := c.Progress(); !p.TimedOut || p.Cancelled != 1 || p.Released != 1 {
			t.Fatalf("progress = %+v", p)
		}
	})
}

func TestTriggerDeadlineShortensDrain(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := New(Config{Timeout: 10 * time.Minute})
		it := c.Track(nil)
		it.Start(func() { it.Done() })
		start := time.Now()
		c.Start(Trigger{Source: "spot", Deadline: start.Add(90 * time.Second)})
		if d := c.Progress().Deadline; !d.Equal(start.Add(90 * time.Second)) {
			t.Fatalf("deadline = %v, want the spot deadline", d)
		}
		if err := c.Wait(context.Background()); !errors.Is(err, ErrTimedOut) {
			t.Fatalf("Wait = %v", err)
		}
		if time.Since(start) != 90*time.Second {
			t.Fatalf("drain took %v", time.Since(start))
		}
	})
}

func TestGraceBoundsStuckWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := New(Config{Timeout: time.Second, CancelGrace: 3 * time.Second})
		it := c.Track(nil)
		it.Start(func() {}) // ignores cancellation
		start := time.Now()
		c.Start(Trigger{})
		if err := c.Wait(context.Background()); !errors.Is(err, ErrTimedOut) {
			t.Fatalf("Wait = %v", err)
		}
		if got := time.Since(start); got != 4*time.Second {
			t.Fatalf("Wait returned after %v, want deadline+grace = 4s", got)
		}
	})
}

func TestWaitHonoursContext(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

func TestEmptyDrainEndsAtOnce(t *testing.T) {
	t.Parallel()
	c := New(Config{})
	c.Start(Trigger{Source: "admin"})
	if err := c.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.Progress().EndedAt.IsZero() {
		t.Fatal("EndedAt not set for a drain with no work")
	}
}

// TestHoldWaitsForLateWork: intake holds the controller while a receive may
// still answer. The drain starts with no work; messages tracked after Start
// (the answer arrived as the drain began) are waited for, and the drain
// ends only once the hold is let go and that work is done.
func TestHoldWaitsForLateWork(t *testing.T) {
	t.Parallel()
	for _, queued := range []string{QueuedFinish, QueuedRelease} {
		t.Run(queued, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := New(Config{Timeout: time.Minute, Queued: queued})
				release := c.Hold()
				c.Start(Trigger{Source: "signal"})
				waited := make(chan error, 1)
				go func() { waited <- c.Wait(context.Background()) }()
				synctest.Wait()
				select {
				case err := <-waited:
					t.Fatalf("Wait returned %v while intake held the drain", err)
				default:
				}
				if p := c.Progress(); p.Remaining() != 0 || !p.EndedAt.IsZero() {
					t.Fatalf("progress while held = %+v; want no work counted and not ended", p)
				}
				var released atomic.Int32
				late := c.Track(func() { released.Add(1) })
				release()
				release() // idempotent
				started := late.Start(func() {})
				if started != (queued == QueuedFinish) {
					t.Fatalf("late work started = %v under queued=%s", started, queued)
				}
				if started {
					synctest.Wait()
					select {
					case err := <-waited:
						t.Fatalf("Wait returned %v with late work running", err)
					default:
					}
					late.Done()
				}
				if err := <-waited; err != nil {
					t.Fatalf("Wait = %v", err)
				}
				if want := map[string]int32{QueuedFinish: 0, QueuedRelease: 1}[queued]; released.Load() != want {
					t.Fatalf("late work released %d times under queued=%s; want %d", released.Load(), queued, want)
				}
				if c.Progress().EndedAt.IsZero() {
					t.Fatal("EndedAt not set")
				}
			})
		})
	}
}

// manualClock is a Clock whose time stands still and whose timers fire
// only when the test fires them; it records the durations asked for.
type manualClock struct {
	now    time.Time
	timers chan manualTimer
}

type manualTimer struct {
	d  time.Duration
	ch chan time.Time
}

func (m *manualClock) Now() time.Time { return m.now }

func (m *manualClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	m.timers <- manualTimer{d: d, ch: ch}
	return ch
}

// TestClockDrivesDeadline: the start, the deadline and both of Wait's
// timers (the deadline, then the cancel grace) come from the injected
// clock, not the wall clock.
func TestClockDrivesDeadline(t *testing.T) {
	t.Parallel()
	clk := &manualClock{now: time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC), timers: make(chan manualTimer, 1)}
	const timeout, grace = time.Minute, 5 * time.Second
	c := New(Config{Timeout: timeout, CancelGrace: grace}, WithClock(clk))
	var cancelled atomic.Bool
	it := c.Track(nil)
	it.Start(func() { cancelled.Store(true) })
	c.Start(Trigger{Source: "signal"})
	p := c.Progress()
	if !p.StartedAt.Equal(clk.now) || !p.Deadline.Equal(clk.now.Add(timeout)) {
		t.Fatalf("started %s, deadline %s; want %s and %s from the clock", p.StartedAt, p.Deadline, clk.now, clk.now.Add(timeout))
	}
	waited := make(chan error, 1)
	go func() { waited <- c.Wait(context.Background()) }()
	deadline := <-clk.timers
	if deadline.d != timeout {
		t.Fatalf("Wait's deadline timer is %s, want %s", deadline.d, timeout)
	}
	deadline.ch <- clk.now.Add(timeout)
	graceTimer := <-clk.timers
	if graceTimer.d != grace {
		t.Fatalf("grace timer is %s, want %s", graceTimer.d, grace)
	}
	if !cancelled.Load() {
		t.Fatal("running work not cancelled at the clock's deadline")
	}
	graceTimer.ch <- clk.now.Add(timeout + grace)
	if err := <-waited; !errors.Is(err, ErrTimedOut) {
		t.Fatalf("Wait = %v, want ErrTimedOut", err)
	}
}
