package resolution

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// Store remembers an alert's tasks and its resolution.
type Store interface {
	// Index remembers that task id came from the alert key.
	Index(ctx context.Context, key, taskID string) error
	// Resolve records the alert's resolution at at unless one was
	// recorded; it returns the alert's task ids and whether this call
	// recorded it.
	Resolve(ctx context.Context, key string, at time.Time) (tasks []string, first bool, err error)
	// ResolvedAt is when the alert resolved, if it did (within KeepFor):
	// a report written after it is stamped too.
	ResolvedAt(ctx context.Context, key string) (at time.Time, resolved bool, err error)
	// SetFiring remembers that the alarm (a source whose resolution names
	// the alarm, not the firing: CloudWatch) is in the firing eventID.
	SetFiring(ctx context.Context, alarm, eventID string) error
	// Firing is the event id of the alarm's last firing; "" = none known.
	Firing(ctx context.Context, alarm string) (string, error)
	// Append adds a stamped report to the capped log report-stats reads.
	Append(ctx context.Context, e Entry) error
	// Log returns the log, oldest first (at most LogMax).
	Log(ctx context.Context) ([]Entry, error)
}

// Entry is one report whose alert resolved.
type Entry struct {
	TaskID     string    `json:"task_id"`
	Diagnostic string    `json:"diagnostic"`
	Confidence string    `json:"confidence"`
	ReportAt   time.Time `json:"report_at"`
	ResolvedAt time.Time `json:"resolved_at"`
}

// LogMax caps the log of stamped reports.
const LogMax = 100000

// KeepFor is how long an alert's tasks and resolution are remembered:
// the task records' TTL.
const KeepFor = 24 * time.Hour

// redisClient is what Redis uses of go-redis.
type redisClient interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	XAdd(ctx context.Context, a *redis.XAddArgs) *redis.StringCmd
	XRangeN(ctx context.Context, stream, start, stop string, count int64) *redis.XMessageSliceCmd
}

// Redis is the Store of fleet mode. Keys (an alert's two share a slot):
//
//	<prefix>resolve:{<source>:<event id>}:tasks  set of task ids
//	<prefix>resolve:{<source>:<event id>}:at     RFC 3339 time of the resolution
//	<prefix>resolve:{cloudwatch:<alarm>}:firing  event id of the alarm's last firing
//	<prefix>resolve:log                          stream of stamped reports (Entry JSON), MAXLEN ~ LogMax
type Redis struct {
	c      redisClient
	prefix string
}

// NewRedis returns a Store on c; prefix is redis.prefix.
func NewRedis(c redisClient, prefix string) *Redis { return &Redis{c: c, prefix: prefix + "resolve:"} }

func (r *Redis) keys(key string) (tasks, at string) {
	k := r.prefix + "{" + key + "}:"
	return k + "tasks", k + "at"
}

// Index implements Store: one round trip.
func (r *Redis) Index(ctx context.Context, key, taskID string) error {
	tasks, _ := r.keys(key)
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.SAdd(ctx, tasks, taskID)
		p.Expire(ctx, tasks, KeepFor)
		return nil
	})
	if err != nil {
		return fmt.Errorf("resolution: index %s: %w", taskID, err)
	}
	return nil
}

// Resolve implements Store: one round trip.
func (r *Redis) Resolve(ctx context.Context, key string, at time.Time) ([]string, bool, error) {
	tasks, atKey := r.keys(key)
	var set *redis.BoolCmd
	var members *redis.StringSliceCmd
	_, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetNX(ctx, atKey, at.UTC().Format(time.RFC3339Nano), KeepFor)
		members = p.SMembers(ctx, tasks)
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("resolution: resolve %s: %w", key, err)
	}
	return members.Val(), set.Val(), nil
}

// ResolvedAt implements Store: one round trip.
func (r *Redis) ResolvedAt(ctx context.Context, key string) (time.Time, bool, error) {
	_, atKey := r.keys(key)
	v, err := r.c.Get(ctx, atKey).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("resolution: read %s: %w", key, err)
	}
	at, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("resolution: %s: a resolution time %.40q: %w", key, v, err)
	}
	return at, true, nil
}

// SetFiring implements Store: one round trip.
func (r *Redis) SetFiring(ctx context.Context, alarm, eventID string) error {
	if err := r.c.Set(ctx, r.prefix+"{"+alarm+"}:firing", eventID, KeepFor).Err(); err != nil {
		return fmt.Errorf("resolution: firing of %s: %w", alarm, err)
	}
	return nil
}

// Firing implements Store: one round trip.
func (r *Redis) Firing(ctx context.Context, alarm string) (string, error) {
	v, err := r.c.Get(ctx, r.prefix+"{"+alarm+"}:firing").Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("resolution: firing of %s: %w", alarm, err)
	}
	return v, nil
}

// Append implements Store.
func (r *Redis) Append(ctx context.Context, e Entry) error {
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("resolution: log: %w", err)
	}
	if err := r.c.XAdd(ctx, &redis.XAddArgs{Stream: r.prefix + "log", MaxLen: LogMax, Approx: true, Values: []any{"e", body}}).Err(); err != nil {
		return fmt.Errorf("resolution: log: %w", err)
	}
	return nil
}

// Log implements Store.
func (r *Redis) Log(ctx context.Context) ([]Entry, error) {
	msgs, err := r.c.XRangeN(ctx, r.prefix+"log", "-", "+", LogMax+LogMax/10).Result()
	if err != nil {
		return nil, fmt.Errorf("resolution: read the log: %w", err)
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		s, _ := m.Values["e"].(string)
		var e Entry
		if json.Unmarshal([]byte(s), &e) == nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// Memory is the Store of embedded mode.
type Memory struct {
	log   []Entry
	clk   clock.Clock
	mu    sync.Mutex
	tasks map[string]map[string]time.Time // key → task id → when indexed
	at    map[string]time.Time
	// firing is alarm → its last firing's event id and when it was set.
	firing map[string]firing
}

type firing struct {
	eventID string
	at      time.Time
}

// NewMemory returns an empty store; clk nil is the wall clock.
func NewMemory(clk clock.Clock) *Memory {
	if clk == nil {
		clk = clock.Wall{}
	}
	return &Memory{clk: clk, tasks: map[string]map[string]time.Time{}, at: map[string]time.Time{}, firing: map[string]firing{}}
}

// Index implements Store.
func (m *Memory) Index(_ context.Context, key, taskID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	m.sweep(now)
	if m.tasks[key] == nil {
		m.tasks[key] = map[string]time.Time{}
	}
	m.tasks[key][taskID] = now
	return nil
}

// sweep drops what is older than KeepFor, when the maps grow.
func (m *Memory) sweep(now time.Time) {
	if len(m.tasks)+len(m.at)+len(m.firing) < 4096 {
		return
	}
	for k, f := range m.firing {
		if now.Sub(f.at) > KeepFor {
			delete(m.firing, k)
		}
	}
	for k, ids := range m.tasks {
		for id, t := range ids {
			if now.Sub(t) > KeepFor {
				delete(ids, id)
			}
		}
		if len(ids) == 0 {
			delete(m.tasks, k)
		}
	}
	for k, t := range m.at {
		if now.Sub(t) > KeepFor {
			delete(m.at, k)
		}
	}
}

// Resolve implements Store.
func (m *Memory) Resolve(_ context.Context, key string, at time.Time) ([]string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, seen := m.at[key]
	if !seen {
		m.at[key] = at
	}
	var ids []string
	for id := range m.tasks[key] {
		ids = append(ids, id)
	}
	return ids, !seen, nil
}

// ResolvedAt implements Store.
func (m *Memory) ResolvedAt(_ context.Context, key string) (time.Time, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.at[key]
	return at, ok, nil
}

// SetFiring implements Store.
func (m *Memory) SetFiring(_ context.Context, alarm, eventID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clk.Now()
	m.sweep(now)
	m.firing[alarm] = firing{eventID: eventID, at: now}
	return nil
}

// Firing implements Store.
func (m *Memory) Firing(_ context.Context, alarm string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.firing[alarm]
	if !ok || m.clk.Now().Sub(f.at) > KeepFor {
		return "", nil
	}
	return f.eventID, nil
}

// Append implements Store.
func (m *Memory) Append(_ context.Context, e Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.log = append(m.log, e)
	if len(m.log) > LogMax {
		m.log = m.log[len(m.log)-LogMax:]
	}
	return nil
}

// Log implements Store.
func (m *Memory) Log(context.Context) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Entry(nil), m.log...), nil
}

var (
	_ Store = (*Redis)(nil)
	_ Store = (*Memory)(nil)
)
