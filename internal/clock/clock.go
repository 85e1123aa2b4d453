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
