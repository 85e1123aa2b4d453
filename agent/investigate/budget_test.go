package investigate

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestDailyBudget: every agent sees the same counters (two budgets on one
// Redis), the budget ends at its value, a new UTC day starts it again,
// and the keys expire.
func TestDailyBudget(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rc.Close() })
	ctx := context.Background()
	prefix := "budgettest:" + time.Now().Format("150405.000000") + ":"
	day := time.Date(2026, 3, 3, 23, 0, 0, 0, time.UTC)
	now := clock.NewManual(day)
	a := NewRedisBudget(rc, prefix, 1000, 0.5, now)
	b := NewRedisBudget(rc, prefix, 1000, 0.5, now)
	mem := NewMemoryBudget(1000, 0.5, now)
	for name, pair := range map[string][2]*DailyBudget{"redis": {a, b}, "memory": {mem, mem}} {
		t.Run(name, func(t *testing.T) {
			now.Set(day)
			if ok, err := pair[1].Left(ctx); !ok || err != nil {
				t.Fatalf("fresh budget: %v %v", ok, err)
			}
			if err := pair[0].Spend(ctx, 999, 0.1); err != nil {
				t.Fatal(err)
			}
			if ok, _ := pair[1].Left(ctx); !ok {
				t.Fatal("999 of 1000 tokens: spent")
			}
			if err := pair[0].Spend(ctx, 1, 0.1); err != nil {
				t.Fatal(err)
			}
			if ok, _ := pair[1].Left(ctx); ok {
				t.Fatal("1000 of 1000 tokens: left")
			}
			now.Add(2 * time.Hour) // the next UTC day
			if ok, _ := pair[1].Left(ctx); !ok {
				t.Fatal("a new day: still spent")
			}
			if err := pair[0].Spend(ctx, 10, 0.5); err != nil {
				t.Fatal(err)
			}
			if ok, _ := pair[1].Left(ctx); ok {
				t.Fatal("0.5 of 0.5 USD: left")
			}
		})
	}
	ttl, err := rc.TTL(ctx, prefix+"{investigate}:daily:2026-03-04:tokens").Result()
	if err != nil || ttl <= 0 || ttl > 48*time.Hour {
		t.Fatalf("TTL %s %v", ttl, err)
	}
}

// TestReserve: a reservation that would pass the cap is refused and adds
// nothing, on Redis (two agents sharing it) and in memory; many agents
// reserving at once never hold more than the cap together; a settled
// reservation gives back what the call did not use.
func TestReserve(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rc.Close() })
	ctx := context.Background()
	prefix := "reservetest:" + time.Now().Format("150405.000000") + ":"
	now := clock.NewManual(time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC))
	a, b := NewRedisBudget(rc, prefix, 1000, 0, now), NewRedisBudget(rc, prefix, 1000, 0, now)
	mem := NewMemoryBudget(1000, 0, now)
	for name, pair := range map[string][2]*DailyBudget{"redis": {a, b}, "memory": {mem, mem}} {
		t.Run(name, func(t *testing.T) {
			results := make(chan bool, 20)
			for range 20 {
				go func() { ok, _ := pair[0].Reserve(ctx, 100); results <- ok }()
			}
			granted := 0
			for range 20 {
				if <-results {
					granted++
				}
			}
			used, _, _ := pair[1].Used(ctx)
			if granted != 10 || used != 1000 {
				t.Fatalf("%d reservations of 100 granted, %d used; want 10 and 1000", granted, used)
			}
			if err := pair[1].Spend(ctx, -400, 0); err != nil { // the calls used 600
				t.Fatal(err)
			}
			if ok, _ := pair[0].Reserve(ctx, 401); ok {
				t.Fatal("600+401 reserved past 1000")
			}
			if ok, _ := pair[0].Reserve(ctx, 400); !ok {
				t.Fatal("600+400 refused")
			}
		})
	}
}
