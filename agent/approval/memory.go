package approval

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/autodiag/autodiag/agent/taskview"
)

// ErrFull: the memory store holds MemoryOptions.Max tasks not yet sent
// on; the task's message comes back and is parked when there is room.
var ErrFull = errors.New("approval: the store is full of tasks awaiting a decision")

// Bounds of the memory store when MemoryOptions leaves them out.
const (
	// DefaultMemoryKeep is the default queue.max_age: a task's message
	// delivered later than that after its decision ends stale before the
	// gate, so its decision is no longer read.
	DefaultMemoryKeep = time.Hour
	// DefaultMemoryMax bounds the tasks held.
	DefaultMemoryMax = 10000
)

// MemoryOptions bound the memory store.
type MemoryOptions struct {
	// Keep is how long a decided task is kept once sent on, so that a
	// redelivery of its message finds its decision: the agent's
	// queue.max_age. 0 = DefaultMemoryKeep.
	Keep time.Duration
	// Max bounds the tasks held: at the cap, the task sent on with the
	// oldest decision goes first; with none sent on, Park is ErrFull.
	// 0 = DefaultMemoryMax.
	Max int
}

// Memory is the Store of embedded mode (one agent): what it holds ends
// with the process, as the memory queue's messages do. A decided task is
// dropped Keep after its decision once it was sent on, and at most Max
// are held.
type Memory struct {
	o         MemoryOptions
	mu        sync.Mutex
	parked    map[string]Parked
	decisions map[string]taskview.Approval
	due       map[string]time.Time
	// sent are the decided tasks sent on, by when they were decided.
	sent map[string]time.Time
	// decidedAt is when each decided task was decided (Decide's now).
	decidedAt map[string]time.Time
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store with the default bounds.
func NewMemory() *Memory { return NewMemoryWith(MemoryOptions{}) }

// NewMemoryWith returns an empty store bounded by o.
func NewMemoryWith(o MemoryOptions) *Memory {
	if o.Keep <= 0 {
		o.Keep = DefaultMemoryKeep
	}
	if o.Max <= 0 {
		o.Max = DefaultMemoryMax
	}
	return &Memory{o: o, parked: map[string]Parked{}, decisions: map[string]taskview.Approval{}, due: map[string]time.Time{},
		sent: map[string]time.Time{}, decidedAt: map[string]time.Time{}}
}

// Park implements Store.
func (m *Memory) Park(_ context.Context, p Parked) (Parked, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.parked[p.TaskID]; ok {
		return m.withDecision(old), false, nil
	}
	if len(m.parked) >= m.o.Max {
		oldest := slices.SortedFunc(maps.Keys(m.sent), func(a, b string) int {
			return cmp.Or(m.sent[a].Compare(m.sent[b]), cmp.Compare(a, b))
		})
		if len(oldest) == 0 {
			return Parked{}, false, ErrFull
		}
		m.dropLocked(oldest[0])
	}
	m.parked[p.TaskID] = p
	m.due[p.TaskID] = p.Approval.Deadline
	return p, true, nil
}

// dropLocked forgets id.
func (m *Memory) dropLocked(id string) {
	delete(m.parked, id)
	delete(m.decisions, id)
	delete(m.due, id)
	delete(m.sent, id)
	delete(m.decidedAt, id)
}

func (m *Memory) withDecision(p Parked) Parked {
	if d, ok := m.decisions[p.TaskID]; ok {
		p.Approval.Decision, p.Approval.By, p.Approval.Reason, p.Approval.Via, p.Approval.DecidedAt = d.Decision, d.By, d.Reason, d.Via, d.DecidedAt
	}
	return p
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, id string) (Parked, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.parked[id]
	if !ok {
		return Parked{}, false, nil
	}
	return m.withDecision(p), true, nil
}

// Decide implements Store.
func (m *Memory) Decide(_ context.Context, id string, a taskview.Approval, now time.Time) (taskview.Approval, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.parked[id]; !ok {
		return taskview.Approval{}, ErrUnknown
	}
	if old, ok := m.decisions[id]; ok {
		return old, ErrDecided
	}
	m.decisions[id] = a
	m.decidedAt[id] = now
	m.due[id] = now
	return a, nil
}

// Due implements Store; it also drops the tasks sent on more than Keep
// after their decision.
func (m *Memory) Due(_ context.Context, now time.Time, lease time.Duration, n int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, at := range m.sent {
		if now.Sub(at) > m.o.Keep {
			m.dropLocked(id)
		}
	}
	var out []string
	for _, id := range m.sortedLocked() {
		if len(out) == n || m.due[id].After(now) {
			break
		}
		m.due[id] = now.Add(lease)
		out = append(out, id)
	}
	return out, nil
}

// sortedLocked is the due ids, earliest first.
func (m *Memory) sortedLocked() []string {
	return slices.SortedFunc(maps.Keys(m.due), func(a, b string) int {
		return cmp.Or(m.due[a].Compare(m.due[b]), cmp.Compare(a, b))
	})
}

// Sent implements Store.
func (m *Memory) Sent(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.due, id)
	if at, ok := m.decidedAt[id]; ok {
		m.sent[id] = at
	}
	return nil
}

// Waiting implements Store.
func (m *Memory) Waiting(_ context.Context, n int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := m.sortedLocked()
	return ids[:min(n, len(ids))], nil
}

// Pending implements Store.
func (m *Memory) Pending(_ context.Context, _ time.Time) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.parked) - len(m.decisions)), nil
}
