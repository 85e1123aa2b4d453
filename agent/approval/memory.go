package approval

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/autodiag/autodiag/agent/taskview"
)

// Memory is the Store of embedded mode (one agent): what it holds ends
// with the process, as the memory queue's messages do.
type Memory struct {
	mu        sync.Mutex
	parked    map[string]Parked
	decisions map[string]taskview.Approval
	due       map[string]time.Time
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store.
func NewMemory() *Memory {
	return &Memory{parked: map[string]Parked{}, decisions: map[string]taskview.Approval{}, due: map[string]time.Time{}}
}

// Park implements Store.
func (m *Memory) Park(_ context.Context, p Parked) (Parked, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.parked[p.TaskID]; ok {
		return m.withDecision(old), false, nil
	}
	m.parked[p.TaskID] = p
	m.due[p.TaskID] = p.Approval.Deadline
	return p, true, nil
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
	m.due[id] = now
	return a, nil
}

// Due implements Store.
func (m *Memory) Due(_ context.Context, now time.Time, lease time.Duration, n int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
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
	return nil
}

// Waiting implements Store.
func (m *Memory) Waiting(_ context.Context, n int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := m.sortedLocked()
	return ids[:min(n, len(ids))], nil
}
