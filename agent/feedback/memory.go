package feedback

import (
	"context"
	"sync"
)

// Memory is the Store of embedded mode.
type Memory struct {
	mu  sync.Mutex
	by  map[string]Verdict // task id + "\x00" + person
	log []Verdict
}

// NewMemory returns an empty store.
func NewMemory() *Memory { return &Memory{by: map[string]Verdict{}} }

// Record implements Store.
func (m *Memory) Record(_ context.Context, v Verdict) (Verdict, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := v.TaskID + "\x00" + v.By
	if old, ok := m.by[k]; ok {
		return old, ErrAlreadyRecorded
	}
	m.by[k] = v
	m.log = append(m.log, v)
	if len(m.log) > LogMax {
		m.log = m.log[len(m.log)-LogMax:]
	}
	return v, nil
}

// Log implements Store.
func (m *Memory) Log(context.Context) ([]Verdict, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Verdict(nil), m.log...), nil
}

var _ Store = (*Memory)(nil)
