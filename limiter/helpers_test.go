package limiter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/testenv"
)

// requireEnv returns the value of an env var a test needs; without it the
// test is skipped locally and fails under CI=true.
func requireEnv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set (required under CI=true)", name)
		}
		t.Skipf("%s is not set", name)
	}
	return v
}

// testRedis returns a client for AUTODIAG_TEST_REDIS_ADDR, without
// ContextTimeoutEnabled: the backend runs each call on a goroutine of its own.
func testRedis(t testing.TB) *redis.Client {
	return testRedisOpts(t, redis.Options{})
}

// testRedisDirect returns a client for AUTODIAG_TEST_REDIS_ADDR with
// ContextTimeoutEnabled, as the agent builds it: the backend calls it on
// the caller's goroutine under a context deadline.
func testRedisDirect(t testing.TB) *redis.Client {
	return testRedisOpts(t, redis.Options{ContextTimeoutEnabled: true})
}

func testRedisOpts(t testing.TB, opt redis.Options) *redis.Client {
	t.Helper()
	addr := requireEnv(t, "AUTODIAG_TEST_REDIS_ADDR")
	opt.Addr = addr
	c := redis.NewClient(&opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis at %s: %v", addr, err)
	}
	return c
}

// uniquePrefix is a key prefix no other test uses.
func uniquePrefix(t testing.TB) string {
	return "autodiagtest:" + sanitize(t.Name()) + ":" + randHex(4) + ":"
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case '{', '}', ' ', '*', '?', '[', ']':
			return '_'
		}
		return r
	}, s)
}

// scanKeys returns every key matching pattern (on every master of a cluster).
func scanKeys(t testing.TB, c redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			keys = append(keys, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch cc := c.(type) {
	case *redis.ClusterClient:
		err = cc.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, cc)
	default:
		t.Fatalf("scanKeys: unsupported client %T", c)
	}
	if err != nil {
		t.Fatalf("scan %s: %v", pattern, err)
	}
	return keys
}

// closedAddr returns a loopback address nothing listens on, below the
// kernel's ephemeral range (testenv.ClosedPort): a port that a listener on
// :0 handed back is one that another test's server can bind next, or that
// a client dialling it can be given as its own and connect to itself.
func closedAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + testenv.ClosedPort(t)
}

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
