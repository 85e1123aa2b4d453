package limiter

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a consecutive-failure circuit breaker on the limiter's clock.
// Closed: every decision calls the backend. After threshold consecutive
// failures it opens: decisions are made by the fail mode without waiting on
// the backend, until cooldown has passed; then exactly one probe goes
// through (half-open). A successful probe closes it, a failed one reopens it.
type breaker struct {
	threshold int
	cooldown  time.Duration

	// fails is read without the lock on the happy path (closed breaker).
	fails     atomic.Int64
	mu        sync.Mutex
	openUntil time.Time
	probing   bool
}

// allow reports whether a decision may call the backend now.
func (b *breaker) allow(now time.Time) bool {
	if b.fails.Load() < int64(b.threshold) {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fails.Load() < int64(b.threshold) {
		return true
	}
	if now.Before(b.openUntil) || b.probing {
		return false
	}
	b.probing = true
	return true
}

// closed reports whether the breaker lets every call through (no
// failures to its threshold), without taking a probe.
func (b *breaker) closed() bool { return b.fails.Load() < int64(b.threshold) }

func (b *breaker) success() {
	if b.fails.Load() == 0 {
		return
	}
	b.mu.Lock()
	b.fails.Store(0)
	b.probing = false
	b.mu.Unlock()
}

func (b *breaker) failure(now time.Time) {
	b.mu.Lock()
	if b.fails.Add(1) >= int64(b.threshold) {
		b.openUntil, b.probing = now.Add(b.cooldown), false
	}
	b.mu.Unlock()
}

// abort forgets a call that ended because the caller's context did (not a
// backend failure).
func (b *breaker) abort() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// state names the backend state for logs: "up", "failing" or "breaker_open".
func (b *breaker) state() string {
	switch f := b.fails.Load(); {
	case f == 0:
		return "up"
	case f < int64(b.threshold):
		return "failing"
	default:
		return "breaker_open"
	}
}
