// Package clock is the one Clock the agent's parts take, so that a test
// injects one fake for all of them. It imports nothing of autodiag.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time; tests inject a fake one.
type Clock interface{ Now() time.Time }

// Waiter is a Clock that can also wait: the drain's deadline and the
// lifecycle heartbeats are timers on it. Wall is one; tests inject a fake
// or run under testing/synctest with Wall.
type Waiter interface {
	Clock
	// After behaves like time.After.
	After(d time.Duration) <-chan time.Time
}

// Wall is the real time.
type Wall struct{}

// Now is time.Now.
func (Wall) Now() time.Time { return time.Now() }

// After is time.After.
func (Wall) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Func adapts a function to Clock, for a clock a test computes (an
// offset from the wall clock, a value under a lock).
type Func func() time.Time

// Now calls f.
func (f Func) Now() time.Time { return f() }

// Manual is a Clock that moves only when told: tests step it past TTLs
// and heartbeats instead of waiting. Safe for concurrent use.
type Manual struct {
	mu sync.Mutex
	t  time.Time
}

// NewManual is a Manual clock at t.
func NewManual(t time.Time) *Manual { return &Manual{t: t} }

// Now is the clock's time.
func (m *Manual) Now() time.Time { m.mu.Lock(); defer m.mu.Unlock(); return m.t }

// Add moves the clock by d.
func (m *Manual) Add(d time.Duration) { m.mu.Lock(); defer m.mu.Unlock(); m.t = m.t.Add(d) }

// Set moves the clock to t.
func (m *Manual) Set(t time.Time) { m.mu.Lock(); defer m.mu.Unlock(); m.t = t }

// StoppedAfter is how many times its timeout a deadline-bounded call must
// have taken, wall time, before its lateness is put down to its process
// not running (stopped, frozen, starved of CPU) rather than to what it
// called: a deadline bounds the wait on the callee, so a slow or
// overloaded callee ends a call at about its timeout; ten times that is
// a stop, not a queue (at twice, calls against an overloaded Redis were
// retried into it).
const StoppedAfter = 10

// Stopped reports whether a call bounded by timeout that started at start
// (wall time) has taken more than StoppedAfter times its timeout.
func Stopped(start time.Time, timeout time.Duration) bool {
	return timeout > 0 && time.Since(start) > StoppedAfter*timeout
}
