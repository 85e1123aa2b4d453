package open

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
			rc, err := RedisClient(config.RedisConfig{URL: "redis://" + addr, Timeout: timeout}, conns)
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

// TestRedisPipelinesKeepToTheConnectionBound: pipelines (the heartbeat,
// the outbox, the hand-off's Give) take their connections from the same
// bounded pool as single commands. go-redis gives pipelines a pool of
// their own by default, 10 connections beside the main pool's, so against
// a Redis whose replies are held an agent opened up to 10 more
// connections, each one a HELLO for that Redis, than redisConns allows.
func TestRedisPipelinesKeepToTheConnectionBound(t *testing.T) {
	t.Parallel()
	const (
		timeout = 100 * time.Millisecond // redis.timeout
		conns   = 3
		calls   = 10 // pipelines at once, while Redis's replies are held
	)
	p := testenv.NewHoldProxy(t, testenv.RedisAddr(t))
	rc, err := RedisClient(config.RedisConfig{URL: "redis://" + p.Addr(), Timeout: timeout}, conns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	key := "autodiag-test:pipelines:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	pipe := func(ctx context.Context) error {
		_, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Incr(ctx, key)
			p.Expire(ctx, key, time.Minute)
			return nil
		})
		return err
	}
	warm, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := pipe(warm); err != nil {
		t.Fatal(err)
	}
	before := p.Accepted()

	p.Hold()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ended := 0 // pipelines that found no connection within their deadline
	for range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			err := pipe(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ended++
			}
		})
	}
	// Those that got a connection wait for their replies, held: the rest
	// end at their deadline, without one.
	waitFor(t, "the pipelines without a connection to end", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ended >= calls-conns
	})
	opened := p.Accepted() - before
	p.Release()
	wg.Wait()
	if opened > conns-1 { // one was opened by the warm-up
		t.Errorf("%d pipelines at once against held replies opened %d connections, want at most %d (redisConns bounds them)",
			calls, opened, conns-1)
	}
}

// TestRedisClientShapesKeepTheBound: every shape of redis config (a URL,
// a Cluster's seeds, a Sentinel's master) builds a client whose pool is
// conns and whose pipelines share it (no separate pipeline pool), with
// reads bounded by IOTimeout; a URL's own pool_size and
// pipeline_pool_size win. TestRedisPipelinesKeepToTheConnectionBound
// shows what the pipeline pool does on a server; a Cluster's node clients
// and a Sentinel's failover client take the same options.
func TestRedisClientShapesKeepTheBound(t *testing.T) {
	t.Parallel()
	const conns, timeout = 7, 300 * time.Millisecond
	type shape struct{ pool, pipelines int }
	cases := []struct {
		name string
		cfg  config.RedisConfig
		want shape
	}{
		{"url", config.RedisConfig{URL: "redis://127.0.0.1:1"}, shape{conns, -1}},
		{"url with its own pools", config.RedisConfig{URL: "redis://127.0.0.1:1?pool_size=3&pipeline_pool_size=2"}, shape{3, 2}},
		{"cluster", config.RedisConfig{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, shape{conns, -1}},
		{"sentinel", config.RedisConfig{Addrs: []string{"127.0.0.1:1"}, MasterName: "m"}, shape{conns, -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Timeout = timeout
			rc, err := RedisClient(tc.cfg, conns)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			var got shape
			var read time.Duration
			switch c := rc.(type) {
			case *redis.Client:
				o := c.Options()
				got, read = shape{o.PoolSize, o.PipelinePoolSize}, o.ReadTimeout
			case *redis.ClusterClient:
				o := c.Options()
				got, read = shape{o.PoolSize, o.PipelinePoolSize}, o.ReadTimeout
			default:
				t.Fatalf("client %T", rc)
			}
			if got != tc.want || read != IOTimeout(timeout) {
				t.Errorf("pool %d, pipeline pool %d, read timeout %v; want %d, %d, %v",
					got.pool, got.pipelines, read, tc.want.pool, tc.want.pipelines, IOTimeout(timeout))
			}
		})
	}
}

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
