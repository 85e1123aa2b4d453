package notify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// ThreadTTL is how long the Slack thread of an alert, and the mark of a
// posted delivery, are kept: as long as any of its events can still be
// delivered (notify_max_age is at most 168h).
const ThreadTTL = 7 * 24 * time.Hour

// pendingPrefix marks a thread whose first message is being posted.
const pendingPrefix = "pending:"

// ThreadStore keeps, per alert, the ts of the Slack message its thread
// hangs under, and which deliveries were posted: in Redis in fleet mode
// (any agent delivers the next event of the alert), in memory in
// embedded mode.
type ThreadStore interface {
	// Begin returns the ts of key's thread. When there is none yet, it
	// claims the first message for owner for hold: won says the caller is
	// to post it (and Keep its ts); a claim another owner holds gives
	// ("", false): that delivery is posting the first message now.
	Begin(ctx context.Context, key, owner string, hold time.Duration) (ts string, won bool, err error)
	// Keep records ts as key's thread for ThreadTTL.
	Keep(ctx context.Context, key, ts string) error
	// Posted says whether the delivery id was marked posted.
	Posted(ctx context.Context, id string) (bool, error)
	// MarkPosted marks the delivery id posted, for ThreadTTL.
	MarkPosted(ctx context.Context, id string) error
}

// ThreadsFor is the thread store that goes with an outbox: in the same
// Redis for a RedisOutbox, in memory otherwise.
func ThreadsFor(ob Outbox, clk clock.Clock) ThreadStore {
	if r, ok := ob.(*RedisOutbox); ok {
		if c, ok := r.c.(threadClient); ok {
			return &RedisThreads{c: c, prefix: r.prefix + "slack:"}
		}
	}
	return NewMemoryThreads(clk)
}

// threadClient is what RedisThreads uses of go-redis.
type threadClient interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	Exists(ctx context.Context, keys ...string) *redis.IntCmd
}

// RedisThreads is the ThreadStore of fleet mode. Keys (hash tag {notify},
// beside the outbox):
//
//	<prefix>{notify}:slack:thread:<sink>:<alert>  string: the thread's ts, or pending:<delivery id>
//	<prefix>{notify}:slack:posted:<delivery id>   string: "1"
type RedisThreads struct {
	c      threadClient
	prefix string
}

// NewRedisThreads returns a ThreadStore on c; prefix is redis.prefix.
func NewRedisThreads(c threadClient, prefix string) *RedisThreads {
	return &RedisThreads{c: c, prefix: prefix + "{notify}:slack:"}
}

// Begin implements ThreadStore.
func (r *RedisThreads) Begin(ctx context.Context, key, owner string, hold time.Duration) (string, bool, error) {
	k := r.prefix + "thread:" + key
	for range 2 {
		v, err := r.c.Get(ctx, k).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", false, fmt.Errorf("notify: slack thread: %w", err)
		}
		if ts, won, done := decideThread(v, owner); done {
			return ts, won, nil
		}
		ok, err := r.c.SetNX(ctx, k, pendingPrefix+owner, hold).Result()
		if err != nil {
			return "", false, fmt.Errorf("notify: slack thread: %w", err)
		}
		if ok {
			return "", true, nil
		}
		// Another delivery claimed it between the two calls: read again.
	}
	return "", false, nil
}

// decideThread reads a stored thread value for owner: a ts, a claim of
// owner (its own earlier attempt: post again), another's claim, or
// nothing (done false: claim it).
func decideThread(v, owner string) (ts string, won, done bool) {
	switch {
	case v == "":
		return "", false, false
	case v == pendingPrefix+owner:
		return "", true, true
	case strings.HasPrefix(v, pendingPrefix):
		return "", false, true
	}
	return v, false, true
}

// Keep implements ThreadStore.
func (r *RedisThreads) Keep(ctx context.Context, key, ts string) error {
	if err := r.c.Set(ctx, r.prefix+"thread:"+key, ts, ThreadTTL).Err(); err != nil {
		return fmt.Errorf("notify: keep slack thread: %w", err)
	}
	return nil
}

// Posted implements ThreadStore.
func (r *RedisThreads) Posted(ctx context.Context, id string) (bool, error) {
	n, err := r.c.Exists(ctx, r.prefix+"posted:"+id).Result()
	if err != nil {
		return false, fmt.Errorf("notify: slack posted mark: %w", err)
	}
	return n > 0, nil
}

// MarkPosted implements ThreadStore.
func (r *RedisThreads) MarkPosted(ctx context.Context, id string) error {
	if err := r.c.Set(ctx, r.prefix+"posted:"+id, "1", ThreadTTL).Err(); err != nil {
		return fmt.Errorf("notify: slack posted mark: %w", err)
	}
	return nil
}

// MemoryThreads is the ThreadStore of embedded mode.
type MemoryThreads struct {
	clk clock.Clock
	mu  sync.Mutex
	m   map[string]memValue
}

type memValue struct {
	v       string
	expires time.Time
}

// NewMemoryThreads returns an empty store; clk nil is the wall clock.
func NewMemoryThreads(clk clock.Clock) *MemoryThreads {
	if clk == nil {
		clk = clock.Wall{}
	}
	return &MemoryThreads{clk: clk, m: map[string]memValue{}}
}

func (m *MemoryThreads) get(k string) string {
	e, ok := m.m[k]
	if !ok {
		return ""
	}
	if !m.clk.Now().Before(e.expires) {
		delete(m.m, k)
		return ""
	}
	return e.v
}

func (m *MemoryThreads) set(k, v string, ttl time.Duration) {
	now := m.clk.Now()
	if len(m.m) > 4096 {
		// Bounded without a sweeper goroutine: expired entries go when
		// the map grows.
		for key, e := range m.m {
			if !now.Before(e.expires) {
				delete(m.m, key)
			}
		}
	}
	m.m[k] = memValue{v: v, expires: now.Add(ttl)}
}

// Begin implements ThreadStore.
func (m *MemoryThreads) Begin(_ context.Context, key, owner string, hold time.Duration) (string, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := "thread:" + key
	if ts, won, done := decideThread(m.get(k), owner); done {
		return ts, won, nil
	}
	m.set(k, pendingPrefix+owner, hold)
	return "", true, nil
}

// Keep implements ThreadStore.
func (m *MemoryThreads) Keep(_ context.Context, key, ts string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set("thread:"+key, ts, ThreadTTL)
	return nil
}

// Posted implements ThreadStore.
func (m *MemoryThreads) Posted(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.get("posted:"+id) != "", nil
}

// MarkPosted implements ThreadStore.
func (m *MemoryThreads) MarkPosted(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set("posted:"+id, "1", ThreadTTL)
	return nil
}

var (
	_ ThreadStore = (*RedisThreads)(nil)
	_ ThreadStore = (*MemoryThreads)(nil)
)
