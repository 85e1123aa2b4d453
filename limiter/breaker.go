package limiter

import (
	"sync"
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

	mu        sync.Mutex
	fails     int
	openUntil time.Time
	probing   bool
}

// allow reports whether a decision may call the backend now.
func (b *breaker) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fails < b.threshold {
		return true
	}
	if now.Before(b.openUntil) || b.probing {
		return false
	}
	b.probing = true
	return true
}

func (b *breaker) success() {
	b.mu.Lock()
	b.fails, b.probing = 0, false
	b.mu.Unlock()
}

func (b *breaker) failure(now time.Time) {
	b.mu.Lock()
	b.fails++
	if b.fails >= b.threshold {
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
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.fails == 0:
		return "up"
	case b.fails < b.threshold:
		return "failing"
	default:
		return "breaker_open"
	}
}
