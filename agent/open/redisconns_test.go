package open

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestRedisConnectionsOpenedCountsRedials: the agent's client counts the
// connections it opens, on a server and on every node of a Cluster. A
// connection Redis closes (CLIENT KILL: what a restart or a proxy does)
// is opened again by the next call, and counted: the count rises only
// when connections are lost.
func TestRedisConnectionsOpenedCountsRedials(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  func() config.RedisConfig
	}{
		{"server", func() config.RedisConfig {
			return config.RedisConfig{URL: "redis://" + testenv.RedisAddr(t)}
		}},
		{"cluster", func() config.RedisConfig {
			return config.RedisConfig{Addrs: testenv.RedisClusterAddrs(t)}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			rc, err := RedisClient(tc.cfg(), 1) // one connection per node: the one killed below
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rc.Close() })
			openedVec, open := WatchRedisConns(rc, prometheus.NewRegistry())
			opened := func() float64 { return testutil.ToFloat64(openedVec.WithLabelValues(dialOK)) }
			if n := opened(); n != 0 {
				t.Fatalf("opened before any call: %v, want 0", n)
			}
			key := "autodiag-test:conns:" + t.Name()
			if err := rc.Set(ctx, key, "1", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			first := opened()
			if first < 1 {
				t.Fatalf("opened after a call: %v, want ≥ 1", first)
			}
			if err := rc.Get(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if n := opened(); n != first {
				t.Fatalf("a second call opened a connection: %v, want %v (the pool keeps it)", n, first)
			}
			if g := testutil.ToFloat64(open); g < 1 {
				t.Fatalf("autodiag_redis_connections = %v, want ≥ 1", g)
			}
			// The key's node's client shares the pool the calls used, which
			// holds one connection: the calls went one at a time.
			node := nodeOf(ctx, t, rc, key)
			id, err := node.ClientID(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			killer := redis.NewClient(&redis.Options{Addr: node.Options().Addr})
			defer killer.Close()
			if err := killer.ClientKillByFilter(ctx, "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
				t.Fatal(err)
			}
			// The pool finds the killed connection closed when it hands it
			// out, and dials another. go-redis may retry a call on a
			// connection it found broken, so allow a failed call.
			_ = rc.Get(ctx, key).Err()
			if err := rc.Get(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if n := opened(); n <= first {
				t.Fatalf("opened after Redis closed the connection: %v, want > %v", n, first)
			}
		})
	}
}

// nodeOf is a plain client of the node holding key.
func nodeOf(ctx context.Context, t *testing.T, rc redis.UniversalClient, key string) *redis.Client {
	t.Helper()
	switch c := rc.(type) {
	case *redis.Client:
		return c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Fatalf("client %T", rc)
	return nil
}

// TestRedisServerClients: the sampler reads INFO clients of a server and of
// every master of a Cluster, and reports a node, its connections and its
// maxclients as CONFIG GET says.
func TestRedisServerClients(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  func() config.RedisConfig
	}{
		{"server", func() config.RedisConfig { return config.RedisConfig{URL: "redis://" + testenv.RedisAddr(t)} }},
		{"cluster", func() config.RedisConfig { return config.RedisConfig{Addrs: testenv.RedisClusterAddrs(t)} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			rc, err := RedisClient(tc.cfg(), 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rc.Close() })
			s, err := RedisServerClients(rc)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			node := redis.NewClient(&redis.Options{Addr: s.Node})
			defer node.Close()
			cfg, err := node.ConfigGet(ctx, "maxclients").Result()
			if err != nil {
				t.Fatalf("CONFIG GET maxclients of %q: %v", s.Node, err)
			}
			if want, _ := strconv.ParseInt(cfg["maxclients"], 10, 64); s.Max != want || want == 0 {
				t.Errorf("max = %d; want %s (CONFIG GET of %s)", s.Max, cfg["maxclients"], s.Node)
			}
			if s.Connected < 1 || s.Connected > s.Max {
				t.Errorf("connected = %d; want 1 to %d", s.Connected, s.Max)
			}
		})
	}
}

func TestParseInfoClients(t *testing.T) {
	s, err := parseInfoClients("n", map[string]string{"connected_clients": "9", "cluster_connections": "0", "maxclients": "10", "blocked_clients": "0"})
	if err != nil || s.Connected != 9 || s.Max != 10 || s.Share() != 0.9 {
		t.Errorf("Redis 7 INFO: %+v, %v; want 9 of 10", s, err)
	}
	// Before Redis 7.0 INFO clients has no maxclients: no share, no warning.
	if s, err := parseInfoClients("n", map[string]string{"connected_clients": "9"}); err != nil || s.Max != 0 || s.Share() != 0 {
		t.Errorf("Redis 6 INFO: %+v, %v; want 9, max unknown", s, err)
	}
	for _, bad := range []map[string]string{nil, {"connected_clients": "x"}, {"connected_clients": "9", "maxclients": "x"}} {
		if _, err := parseInfoClients("n", bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
