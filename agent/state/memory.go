package state

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/autodiag/autodiag/internal/clock"
)

// MemoryOptions bound a Memory store; zero values take the defaults.
type MemoryOptions struct {
	Clock     clock.Clock   // nil = wall clock
	RecordTTL time.Duration // how long finished task records are kept (default 24h)
	AuditMax  int           // audit entries kept (default 10000)
	MaxTasks  int           // task records (and marks) kept at most, oldest finished dropped first (default 100000)
}

// memory is what the stores of embedded mode share: one agent, nothing
// survives a restart. Their semantics match the Redis stores' so the agent
// code is the same; each concern is its own type over it, as with Redis.
type memory struct {
	o MemoryOptions

	mu        sync.Mutex
	tasks     map[string]*memTask
	audit     []AuditEntry // ring, newest last
	instances map[string]memInstance
	drains    map[string]DrainRecord
	marks     map[string]time.Time // key → expiry
}

type memTask struct {
	rec        TaskRecord
	finishID   string // FinishExtras.ID of the finish that wrote rec
	leaseUntil time.Time
	expires    time.Time // zero while running
}

type memInstance struct {
	inst    Instance
	expires time.Time
}

// MemoryLeases is RedisLeases in memory.
type MemoryLeases struct{ *memory }

// MemoryRecords is RedisRecords in memory.
type MemoryRecords struct{ *memory }

// MemoryAudit is RedisAudit in memory: a ring of AuditMax entries.
type MemoryAudit struct{ *memory }

// MemoryPresence is RedisPresence in memory.
type MemoryPresence struct{ *memory }

var (
	_ LeaseStore = (*MemoryLeases)(nil)
	_ TaskStore  = (*MemoryRecords)(nil)
	_ Marks      = (*MemoryRecords)(nil)
	_ AuditLog   = (*MemoryAudit)(nil)
	_ Presence   = (*MemoryPresence)(nil)
)

// NewMemory returns empty stores of embedded mode over one memory.
func NewMemory(o MemoryOptions) Store {
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	if o.RecordTTL <= 0 {
		o.RecordTTL = 24 * time.Hour
	}
	if o.AuditMax <= 0 {
		o.AuditMax = 10000
	}
	if o.MaxTasks <= 0 {
		o.MaxTasks = 100000
	}
	m := &memory{
		o:         o,
		tasks:     map[string]*memTask{},
		instances: map[string]memInstance{},
		drains:    map[string]DrainRecord{},
		marks:     map[string]time.Time{},
	}
	records := &MemoryRecords{m}
	return Store{LeaseStore: &MemoryLeases{m}, TaskStore: records, AuditLog: &MemoryAudit{m}, Presence: &MemoryPresence{m}, Marks: records}
}

// gc drops expired finished records and, past MaxTasks, the oldest finished
// ones; called with mu held.
func (m *memory) gc(now time.Time) {
	for id, t := range m.tasks {
		if !t.expires.IsZero() && !now.Before(t.expires) {
			delete(m.tasks, id)
		}
	}
	if len(m.tasks) <= m.o.MaxTasks {
		return
	}
	var done []*memTask
	for _, t := range m.tasks {
		if t.rec.Status != StatusRunning {
			done = append(done, t)
		}
	}
	sort.Slice(done, func(i, j int) bool { return done[i].expires.Before(done[j].expires) })
	for _, t := range done {
		if len(m.tasks) <= m.o.MaxTasks {
			break
		}
		delete(m.tasks, t.rec.ID)
	}
}

// Claim implements LeaseStore.
func (m *MemoryLeases) Claim(_ context.Context, rec TaskRecord, owner string, lease time.Duration) (Claim, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Clock.Now()
	m.gc(now)
	t, ok := m.tasks[rec.ID]
	if ok {
		if t.rec.Status == StatusDone {
			return Claim{Result: AlreadyDone, Record: t.rec}, nil
		}
		if t.rec.Status == StatusRunning && t.rec.Owner != owner && now.Before(t.leaseUntil) {
			return Claim{Result: HeldElsewhere, Record: t.rec, LeaseRemaining: t.leaseUntil.Sub(now)}, nil
		}
		rec.Attempts = t.rec.Attempts
	} else {
		t = &memTask{}
		m.tasks[rec.ID] = t
		rec.Attempts = 0
	}
	rec.Attempts++
	rec.Status = StatusRunning
	rec.Owner = owner
	if rec.StartedAt.IsZero() {
		rec.StartedAt = now
	}
	t.rec = rec
	t.leaseUntil = now.Add(lease)
	t.expires = time.Time{}
	return Claim{Result: Claimed, Record: rec}, nil
}

// Renew implements LeaseStore.
func (m *MemoryLeases) Renew(_ context.Context, taskID, owner string, lease time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tasks[taskID]
	if !ok || t.rec.Status != StatusRunning || t.rec.Owner != owner {
		return ErrLeaseLost
	}
	t.leaseUntil = m.o.Clock.Now().Add(lease)
	return nil
}

// Finish implements TaskStore.
func (m *MemoryRecords) Finish(ctx context.Context, rec TaskRecord, x FinishExtras) error {
	for _, c := range x.Calls {
		c.Fallback(ctx)
	}
	repeated, err := m.finish(rec, x)
	if err != nil || repeated {
		return err
	}
	for _, w := range x.Writes {
		w.Apply(ctx)
	}
	return nil
}

// finish writes rec and x.Audit under one lock, the audit entry even
// when rec is superseded; repeated reports a finish with x.ID that
// already landed, which writes nothing.
func (m *MemoryRecords) finish(rec TaskRecord, x FinishExtras) (repeated bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Clock.Now()
	t, ok := m.tasks[rec.ID]
	if ok && x.ID != "" && t.finishID == x.ID && t.rec.Status == StatusDone {
		return true, nil
	}
	if x.Audit != nil {
		m.auditLocked(*x.Audit)
	}
	switch {
	case !ok:
		t = &memTask{}
		m.tasks[rec.ID] = t
	case rec.Attempts > 0 && t.rec.Attempts > rec.Attempts,
		rec.Attempts == 0 && t.rec.Status == StatusRunning && t.rec.Owner != rec.Owner:
		return false, fmt.Errorf("state: finish %s attempt %d: %w", rec.ID, rec.Attempts, ErrSuperseded)
	case rec.Attempts == 0:
		rec.Attempts = t.rec.Attempts
	}
	rec.Status = StatusDone
	if rec.FinishedAt.IsZero() {
		rec.FinishedAt = now
	}
	t.rec = rec
	t.finishID = x.ID
	t.leaseUntil = time.Time{}
	t.expires = now.Add(m.o.RecordTTL)
	return false, nil
}

// Release implements LeaseStore.
func (m *MemoryLeases) Release(_ context.Context, taskID, owner string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tasks[taskID]
	if !ok || t.rec.Owner != owner || t.rec.Status != StatusRunning {
		return nil
	}
	t.rec.Status = StatusInterrupted
	t.leaseUntil = time.Time{}
	t.expires = m.o.Clock.Now().Add(m.o.RecordTTL)
	return nil
}

// Recover implements LeaseStore.
func (m *MemoryLeases) Recover(_ context.Context, owner string) ([]TaskRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []TaskRecord
	for _, t := range m.tasks {
		if t.rec.Status == StatusRunning && t.rec.Owner == owner {
			t.rec.Status = StatusInterrupted
			t.leaseUntil = time.Time{}
			t.expires = m.o.Clock.Now().Add(m.o.RecordTTL)
			out = append(out, t.rec)
		}
	}
	return out, nil
}

// ClaimThen implements LeaseStore: memory has no script to run then in,
// so it does nothing and answers folded false.
func (m *MemoryLeases) ClaimThen(context.Context, TaskRecord, string, time.Duration, Then) (Claim, any, bool, error) {
	return Claim{}, nil, false, nil
}

// InflightIDs implements LeaseStore: memory derives its in-flight entries
// from the records, so it has no leftovers to list besides them.
func (m *MemoryLeases) InflightIDs(_ context.Context, instanceID string) ([]string, error) {
	entries := (&MemoryPresence{m.memory}).inflight(instanceID)
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.TaskID
	}
	return ids, nil
}

// Task implements TaskStore.
func (m *MemoryRecords) Task(_ context.Context, id string) (TaskRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tasks[id]
	if !ok {
		return TaskRecord{}, false, nil
	}
	return t.rec, true, nil
}

// SetReport implements TaskStore.
func (m *MemoryRecords) SetReport(_ context.Context, id string, report json.RawMessage) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tasks[id]
	if !ok {
		return false, nil
	}
	t.rec.Report = slices.Clone(report)
	return true, nil
}

// Audit implements AuditLog.
func (m *MemoryAudit) Audit(_ context.Context, e AuditEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.auditLocked(e)
	return nil
}

func (m *memory) auditLocked(e AuditEntry) {
	if e.Time.IsZero() {
		e.Time = m.o.Clock.Now()
	}
	m.audit = append(m.audit, e)
	if len(m.audit) > m.o.AuditMax {
		m.audit = append(m.audit[:0], m.audit[len(m.audit)-m.o.AuditMax:]...)
	}
}

// RecentAudit implements AuditLog.
func (m *MemoryAudit) RecentAudit(_ context.Context, n int) ([]AuditEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []AuditEntry
	for i := len(m.audit) - 1; i >= 0 && len(out) < n; i-- {
		out = append(out, m.audit[i])
	}
	return out, nil
}

// PutInstance implements InstanceStore.
func (m *MemoryPresence) PutInstance(_ context.Context, inst Instance, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Clock.Now()
	inst.SeenAt = now
	m.instances[inst.ID] = memInstance{inst: inst, expires: now.Add(ttl)}
	return nil
}

// Instances implements InstanceStore.
func (m *MemoryPresence) Instances(context.Context) ([]Instance, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Clock.Now()
	var out []Instance
	for id, i := range m.instances {
		if !now.Before(i.expires.Add(GoneKeep)) {
			delete(m.instances, id)
			continue
		}
		inst := i.inst
		if !now.Before(i.expires) {
			inst.State = StateGone
		}
		out = append(out, inst)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Inflight implements InstanceStore.
func (m *MemoryPresence) Inflight(_ context.Context, instanceID string) ([]InflightEntry, error) {
	return m.inflight(instanceID), nil
}

func (m *MemoryPresence) inflight(instanceID string) []InflightEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []InflightEntry
	for _, t := range m.tasks {
		if t.rec.Status == StatusRunning && t.rec.Owner == instanceID {
			out = append(out, InflightEntry{TaskID: t.rec.ID, Host: t.rec.Host, Diagnostic: t.rec.Diagnostic, StartedAt: t.rec.StartedAt})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	return out
}

// SaveDrain implements DrainStore.
func (m *MemoryPresence) SaveDrain(_ context.Context, instanceID string, d DrainRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drains[instanceID] = d
	return nil
}

// LoadDrain implements DrainStore.
func (m *MemoryPresence) LoadDrain(_ context.Context, instanceID string) (*DrainRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.drains[instanceID]
	if !ok {
		return nil, nil
	}
	return &d, nil
}

// MarkOnce implements Marks. Past MaxTasks marks, expired ones go first,
// then those nearest their expiry.
func (m *MemoryRecords) MarkOnce(_ context.Context, key string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.o.Clock.Now()
	if exp, ok := m.marks[key]; ok && now.Before(exp) {
		return false, nil
	}
	if len(m.marks) >= m.o.MaxTasks {
		for k, exp := range m.marks {
			if !now.Before(exp) {
				delete(m.marks, k)
			}
		}
		for len(m.marks) >= m.o.MaxTasks {
			oldest, at := "", time.Time{}
			for k, exp := range m.marks {
				if oldest == "" || exp.Before(at) {
					oldest, at = k, exp
				}
			}
			delete(m.marks, oldest)
		}
	}
	m.marks[key] = now.Add(max(ttl, time.Millisecond))
	return true, nil
}

// Ping implements InstanceStore; memory always answers.
func (m *MemoryPresence) Ping(context.Context) error { return nil }
