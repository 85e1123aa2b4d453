package notify

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// MemoryOptions configure a MemoryOutbox; zero values mean the defaults.
type MemoryOptions struct {
	ClaimIdle time.Duration // DefaultClaimIdle
	DeadMax   int           // DefaultDeadMax
	MaxLen    int           // DefaultMaxLen: each sink's cap; Shed dead-letters the excess
	Clock     clock.Clock   // nil: the wall clock
}

// MemoryOutbox is the Outbox of embedded mode, with the Redis outbox's
// semantics inside one process.
type MemoryOutbox struct {
	o       MemoryOptions
	mu      sync.Mutex
	seq     int64
	entries []*memEntry // in write order
	dead    []DeadEntry // oldest first
}

type memEntry struct {
	Entry
	ref       string
	owner     string // "" = never claimed
	claimedAt time.Time
	retryAt   time.Time
	claims    int
}

var _ Outbox = (*MemoryOutbox)(nil)

// AddArgs implements Outbox: nil, memory has no stream to write.
func (m *MemoryOutbox) AddArgs(Entry) *redis.XAddArgs { return nil }

// NewMemoryOutbox returns an empty MemoryOutbox.
func NewMemoryOutbox(o MemoryOptions) *MemoryOutbox {
	withOutboxDefaults(&o.ClaimIdle, &o.DeadMax, &o.MaxLen, &o.Clock)
	return &MemoryOutbox{o: o}
}

// ClaimIdle implements Outbox.
func (m *MemoryOutbox) ClaimIdle() time.Duration { return m.o.ClaimIdle }

// Enqueue implements Outbox.
func (m *MemoryOutbox) Enqueue(_ context.Context, entries []Entry) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	refs := make([]string, len(entries))
	for i, e := range entries {
		m.seq++
		refs[i] = strconv.FormatInt(m.seq, 10)
		m.entries = append(m.entries, &memEntry{Entry: e, ref: refs[i]})
	}
	return refs, nil
}

// MaxLen implements Outbox.
func (m *MemoryOutbox) MaxLen() int64 { return int64(m.o.MaxLen) }

// Shed implements Outbox.
func (m *MemoryOutbox) Shed(_ context.Context, sink string, limit int) ([]DeadEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.entries {
		if e.Sink == sink {
			n++
		}
	}
	over := min(n-m.o.MaxLen, limit)
	var out []DeadEntry
	now := m.o.Clock.Now()
	for i := 0; i < len(m.entries) && len(out) < over; {
		e := m.entries[i]
		// An entry in flight is its holder's to end (see RedisOutbox.Shed).
		if e.Sink != sink || (e.owner != "" && now.Sub(e.claimedAt) < m.o.ClaimIdle) {
			i++
			continue
		}
		m.entries = slices.Delete(m.entries, i, i+1)
		m.seq++
		d := DeadEntry{Entry: e.Entry, Reason: ReasonOutboxFull, DiedAt: now, Ref: strconv.FormatInt(m.seq, 10)}
		m.dead = append(m.dead, d)
		out = append(out, d)
	}
	if over := len(m.dead) - m.o.DeadMax; over > 0 {
		m.dead = slices.Delete(m.dead, 0, over)
	}
	return out, nil
}

// Claim implements Outbox.
func (m *MemoryOutbox) Claim(_ context.Context, consumer, sink string, max int, newWork bool) ([]Delivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Clock.Now()
	var out []Delivery
	claim := func(e *memEntry) {
		e.owner, e.claimedAt, e.retryAt = consumer, now, time.Time{}
		e.claims++
		out = append(out, Delivery{Entry: e.Entry, Attempt: e.claims, ref: e.ref})
	}
	for _, e := range m.entries {
		if len(out) >= max {
			return out, nil
		}
		if e.Sink == sink && e.owner != "" && now.Sub(e.claimedAt) >= m.o.ClaimIdle && !now.Before(e.retryAt) {
			claim(e)
		}
	}
	if !newWork {
		return out, nil
	}
	for _, e := range m.entries {
		if len(out) >= max {
			break
		}
		if e.Sink == sink && e.owner == "" {
			claim(e)
		}
	}
	return out, nil
}

func (m *MemoryOutbox) find(ref string) int {
	return slices.IndexFunc(m.entries, func(e *memEntry) bool { return e.ref == ref })
}

// Ack implements Outbox.
func (m *MemoryOutbox) Ack(_ context.Context, d Delivery) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.find(d.ref); i >= 0 {
		m.entries = slices.Delete(m.entries, i, i+1)
	}
	return nil
}

// Retry implements Outbox: the entry is idle enough for anyone to claim,
// and held back until at.
func (m *MemoryOutbox) Retry(_ context.Context, d Delivery, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.find(d.ref); i >= 0 {
		e := m.entries[i]
		e.claimedAt = m.o.Clock.Now().Add(-m.o.ClaimIdle)
		e.retryAt = at
	}
	return nil
}

// Dead implements Outbox.
func (m *MemoryOutbox) Dead(_ context.Context, d Delivery, reason string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i := m.find(d.ref); i >= 0 {
		m.entries = slices.Delete(m.entries, i, i+1)
	}
	m.seq++
	m.dead = append(m.dead, DeadEntry{Entry: d.Entry, Attempts: d.Attempt, Reason: reason,
		DiedAt: m.o.Clock.Now(), Ref: strconv.FormatInt(m.seq, 10)})
	if over := len(m.dead) - m.o.DeadMax; over > 0 {
		m.dead = slices.Delete(m.dead, 0, over)
	}
	return nil
}

// Pending implements Outbox.
func (m *MemoryOutbox) Pending(_ context.Context, sink string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.entries {
		if e.Sink == sink {
			n++
		}
	}
	return int64(n), nil
}

// ListDead implements Outbox.
func (m *MemoryOutbox) ListDead(_ context.Context, max int) ([]DeadEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []DeadEntry
	for i := len(m.dead) - 1; i >= 0 && len(out) < max; i-- {
		out = append(out, m.dead[i])
	}
	return out, nil
}

// Requeue implements Outbox.
func (m *MemoryOutbox) Requeue(_ context.Context, refs []string) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, ref := range refs {
		i := slices.IndexFunc(m.dead, func(d DeadEntry) bool { return d.Ref == ref })
		if i < 0 {
			continue
		}
		m.seq++
		m.entries = append(m.entries, &memEntry{Entry: m.dead[i].Entry, ref: strconv.FormatInt(m.seq, 10)})
		m.dead = slices.Delete(m.dead, i, i+1)
		n++
	}
	return n, nil
}
