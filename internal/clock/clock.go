// Package clock is the one Clock the agent's parts take, so that a test
// injects one fake for all of them. It imports nothing of autodiag.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time; tests inject a fake one.
type Clock interface{ Now() time.Time }

// Wall is the real time.
type Wall struct{}

// Now is time.Now.
func (Wall) Now() time.Time { return time.Now() }

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
