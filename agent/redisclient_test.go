package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestRedisCallsPastTheirTimeoutKeepTheirConnections: state calls that
// Redis does not answer within redis.timeout end at it for their callers,
// but the agent's client keeps their connections (their replies are read
// when they come) and sends nothing for the callers that found every
// connection busy. The client go-redis builds with ContextTimeoutEnabled
// (the agent's before) closes a connection per call instead, and each
// replacement's HELLO meets the same deadline.
func TestRedisCallsPastTheirTimeoutKeepTheirConnections(t *testing.T) {
	t.Parallel()
	const (
		timeout = 100 * time.Millisecond // redis.timeout
		conns   = 3
		calls   = 10 // at once, while Redis's replies are held
	)
	cases := []struct {
		name   string
		client func(addr string) redis.UniversalClient
		// the connections the held calls open and close, and the marks
		// they set in Redis (commands sent)
		maxOpened, dropped, maxSent int
	}{
		{"agent", func(addr string) redis.UniversalClient {
			rc, err := NewRedisClient(config.RedisConfig{URL: "redis://" + addr, Timeout: timeout}, conns)
			if err != nil {
				t.Fatal(err)
			}
			return rc
		}, conns - 1, 0, conns},
		{"go-redis cutting reads at the context's deadline", func(addr string) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		}, calls, calls, calls},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := testenv.NewHoldProxy(t, testenv.RedisAddr(t))
			rc := tc.client(p.Addr())
			t.Cleanup(func() { _ = rc.Close() })
			var b [4]byte
			_, _ = rand.Read(b[:])
			prefix := "autodiag-test:held:" + hex.EncodeToString(b[:]) + ":"
			store := state.NewRedis(rc, state.RedisOptions{Prefix: prefix})

			mark := func(d time.Duration, key string) error {
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				_, err := store.MarkOnce(ctx, key, time.Minute)
				return err
			}
			if err := mark(5*time.Second, "warm"); err != nil {
				t.Fatal(err)
			}
			opened := p.Accepted()

			p.Hold()
			var wg sync.WaitGroup
			errs := make([]error, calls)
			for i := range calls {
				wg.Go(func() { errs[i] = mark(timeout, "held-"+strconv.Itoa(i)) })
			}
			wg.Wait()
			for i, err := range errs {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("held call %d: %v, want a deadline exceeded", i, err)
				}
			}
			opened = p.Accepted() - opened
			p.Release()

			// Redis ran what was sent; the replies come now.
			if err := mark(5*time.Second, "after"); err != nil {
				t.Fatalf("after the release: %v", err)
			}
			if tc.dropped == 0 {
				waitFor(t, "the late replies", func() bool { s := rc.PoolStats(); return s.IdleConns == s.TotalConns })
			} else {
				waitFor(t, "the closes", func() bool { return p.Dropped() >= tc.dropped })
			}
			dropped := p.Dropped()
			sent := 0
			check := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
			defer check.Close()
			for i := range calls {
				n, err := check.Exists(context.Background(), prefix+"mark:{held-"+strconv.Itoa(i)+"}").Result()
				if err != nil {
					t.Fatal(err)
				}
				sent += int(n)
			}
			check.Del(context.Background(), prefix+"mark:{warm}", prefix+"mark:{after}")
			for i := range calls {
				check.Del(context.Background(), prefix+"mark:{held-"+strconv.Itoa(i)+"}")
			}
			t.Logf("%d calls past their timeout: %d connections opened, %d closed, %d commands sent", calls, opened, dropped, sent)
			if opened > tc.maxOpened || dropped != tc.dropped || sent > tc.maxSent {
				t.Errorf("opened %d (at most %d), closed %d (want %d), sent %d (at most %d)",
					opened, tc.maxOpened, dropped, tc.dropped, sent, tc.maxSent)
			}
		})
	}
}
