package fakefault

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
)

// Gate decides which of the requests a fault sees it hits.
type Gate struct {
	// Count limits how many requests are hit; 0 means unlimited.
	Count int
	// Skip lets this many requests through before the fault arms.
	Skip int
	// Probability that a request is hit, in (0,1]; 0 means always.
	Probability float64
}

// Armed is one fault in a Set. Its fields are read under the Set's lock
// (inside Scan).
type Armed[F any] struct {
	ID    int
	Fault F
	gate  Gate
	seen  int
	fired int
}

// Spent reports whether the fault has hit as many requests as its Count.
func (a *Armed[F]) Spent() bool { return a.gate.Count > 0 && a.fired >= a.gate.Count }

// Set is the armed faults of a protocol fake, in the order they were added,
// with the random source their Probability draws come from. It is safe for
// concurrent use; one lock covers the faults and the draws, so a seeded
// fake draws in request order.
type Set[F any] struct {
	mu   sync.Mutex
	next int
	list []*Armed[F]
	rng  *mrand.Rand
}

// NewSet returns an empty Set drawing from rng, or from a randomly seeded
// source when rng is nil.
func NewSet[F any](rng *mrand.Rand) *Set[F] {
	if rng == nil {
		var b [16]byte
		_, _ = rand.Read(b[:])
		rng = mrand.New(mrand.NewPCG(binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])))
	}
	return &Set[F]{rng: rng}
}

// Seeded is the random source of a fake given a seed, so that
// probabilistic faults repeat run after run.
func Seeded(seed uint64) *mrand.Rand { return mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)) }

// Add arms f with gate g and returns its id.
func (s *Set[F]) Add(f F, g Gate) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.list = append(s.list, &Armed[F]{ID: s.next, Fault: f, gate: g})
	return s.next
}

// Remove disarms the fault with the given id.
func (s *Set[F]) Remove(id int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, a := range s.list {
		if a.ID == id {
			s.list = append(s.list[:i], s.list[i+1:]...)
			return
		}
	}
}

// Clear disarms every fault.
func (s *Set[F]) Clear() {
	s.mu.Lock()
	s.list = nil
	s.mu.Unlock()
}

// Fired reports how many requests the fault with the given id hit (0 once
// it is removed).
func (s *Set[F]) Fired(id int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.list {
		if a.ID == id {
			return a.fired
		}
	}
	return 0
}

// Scan calls fn with each armed fault in order, under the lock. hit counts
// the request as seen by that fault and reports whether the fault fires on
// it (see Hit); fn calls it only for requests the fault applies to.
func (s *Set[F]) Scan(fn func(a *Armed[F], hit func() bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.list {
		fn(a, func() bool { return s.hit(a) })
	}
}

// Hit counts one request as seen by a and reports whether a fires on it:
// not once its Count is spent, not for the first Skip requests it sees, and
// then with its Probability.
func (s *Set[F]) Hit(a *Armed[F]) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hit(a)
}

func (s *Set[F]) hit(a *Armed[F]) bool {
	if a.Spent() {
		return false
	}
	a.seen++
	if a.seen <= a.gate.Skip {
		return false
	}
	if a.gate.Probability > 0 && s.rng.Float64() >= a.gate.Probability {
		return false
	}
	a.fired++
	return true
}
