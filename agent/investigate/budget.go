package investigate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
)

// DailyBudget is the fleet-wide budget of investigations a day (UTC):
// tokens and cost, counted where every agent sees them. A zero limit is
// no limit.
type DailyBudget struct {
	Tokens  int64
	CostUSD float64
	store   counterStore
	clock   clock.Clock
}

// counterStore keeps the day's two counters.
type counterStore interface {
	get(ctx context.Context, day string) (tokens int64, cost float64, err error)
	add(ctx context.Context, day string, tokens int64, cost float64) error
	reserve(ctx context.Context, day string, tokens, limit int64) (bool, error)
}

var _ Budget = (*DailyBudget)(nil)

// NewRedisBudget keeps the counters in Redis under
// PREFIX{investigate}:daily:YYYY-MM-DD:{tokens,cost_usd}, kept two days.
func NewRedisBudget(rc redis.UniversalClient, prefix string, tokens int64, costUSD float64, clk clock.Clock) *DailyBudget {
	return newBudget(&redisCounters{rc: rc, prefix: prefix}, tokens, costUSD, clk)
}

// NewMemoryBudget keeps the counters in this process (embedded mode).
func NewMemoryBudget(tokens int64, costUSD float64, clk clock.Clock) *DailyBudget {
	return newBudget(&memCounters{days: map[string][2]float64{}}, tokens, costUSD, clk)
}

func newBudget(s counterStore, tokens int64, cost float64, clk clock.Clock) *DailyBudget {
	if clk == nil {
		clk = clock.Wall{}
	}
	return &DailyBudget{Tokens: tokens, CostUSD: cost, store: s, clock: clk}
}

func (b *DailyBudget) day() string { return b.clock.Now().UTC().Format(time.DateOnly) }

// Left implements Budget.
func (b *DailyBudget) Left(ctx context.Context) (bool, error) {
	if b.Tokens == 0 && b.CostUSD == 0 {
		return true, nil
	}
	tokens, cost, err := b.store.get(ctx, b.day())
	if err != nil {
		return false, fmt.Errorf("investigate: daily budget: %w", err)
	}
	return (b.Tokens == 0 || tokens < b.Tokens) && (b.CostUSD == 0 || cost < b.CostUSD), nil
}

var _ Reserver = (*DailyBudget)(nil)

// Reserve implements Reserver: it adds tokens to the day's count when the
// count stays within Tokens, and says so; otherwise it adds nothing. Two
// agents reserving at once never pass the cap together: each adds first
// and takes its tokens back when the sum passed it.
func (b *DailyBudget) Reserve(ctx context.Context, tokens int64) (bool, error) {
	if b.Tokens == 0 {
		return true, nil
	}
	ok, err := b.store.reserve(ctx, b.day(), tokens, b.Tokens)
	if err != nil {
		return false, fmt.Errorf("investigate: daily budget: %w", err)
	}
	return ok, nil
}

// Spend implements Budget.
func (b *DailyBudget) Spend(ctx context.Context, tokens int64, cost float64) error {
	if err := b.store.add(ctx, b.day(), tokens, cost); err != nil {
		return fmt.Errorf("investigate: daily budget: %w", err)
	}
	return nil
}

// Used is the day's counters, for metrics and `limits`.
func (b *DailyBudget) Used(ctx context.Context) (tokens int64, cost float64, err error) {
	return b.store.get(ctx, b.day())
}

type redisCounters struct {
	rc     redis.UniversalClient
	prefix string
}

// keys share the {investigate} hash tag: one slot in a Cluster, so both
// are read and written in one round trip.
func (r *redisCounters) keys(day string) (string, string) {
	k := r.prefix + "{investigate}:daily:" + day
	return k + ":tokens", k + ":cost_usd"
}

func (r *redisCounters) get(ctx context.Context, day string) (int64, float64, error) {
	kt, kc := r.keys(day)
	vals, err := r.rc.MGet(ctx, kt, kc).Result()
	if err != nil {
		return 0, 0, err
	}
	var tokens int64
	var cost float64
	if s, ok := vals[0].(string); ok {
		tokens, _ = strconv.ParseInt(s, 10, 64)
	}
	if s, ok := vals[1].(string); ok {
		cost, _ = strconv.ParseFloat(s, 64)
	}
	return tokens, cost, nil
}

func (r *redisCounters) add(ctx context.Context, day string, tokens int64, cost float64) error {
	kt, kc := r.keys(day)
	_, err := r.rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.IncrBy(ctx, kt, tokens)
		p.IncrByFloat(ctx, kc, cost)
		p.Expire(ctx, kt, 48*time.Hour)
		p.Expire(ctx, kc, 48*time.Hour)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}

func (r *redisCounters) reserve(ctx context.Context, day string, tokens, limit int64) (bool, error) {
	kt, _ := r.keys(day)
	var incr *redis.IntCmd
	if _, err := r.rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.IncrBy(ctx, kt, tokens)
		p.Expire(ctx, kt, 48*time.Hour)
		return nil
	}); err != nil {
		return false, err
	}
	if incr.Val() <= limit {
		return true, nil
	}
	return false, r.rc.DecrBy(ctx, kt, tokens).Err()
}

type memCounters struct {
	mu   sync.Mutex
	days map[string][2]float64
}

func (m *memCounters) get(_ context.Context, day string) (int64, float64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.days[day]
	return int64(v[0]), v[1], nil
}

func (m *memCounters) add(_ context.Context, day string, tokens int64, cost float64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.days[day]
	m.days[day] = [2]float64{v[0] + float64(tokens), v[1] + cost}
	for d := range m.days {
		if d < day {
			delete(m.days, d)
		}
	}
	return nil
}

func (m *memCounters) reserve(_ context.Context, day string, tokens, limit int64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.days[day]
	if int64(v[0])+tokens > limit {
		return false, nil
	}
	m.days[day] = [2]float64{v[0] + float64(tokens), v[1]}
	return true, nil
}
