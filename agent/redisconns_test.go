package agent

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/harness"
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
			rc, err := NewRedisClient(tc.cfg(), 1) // one connection per node: the one killed below
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rc.Close() })
			openedVec, open := watchRedisConns(rc, prometheus.NewRegistry())
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
			rc, err := NewRedisClient(tc.cfg(), 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = rc.Close() })
			s, err := redisServerClients(rc)(ctx)
			if err != nil {
				t.Fatal(err)
			}
			node := redis.NewClient(&redis.Options{Addr: s.node})
			defer node.Close()
			cfg, err := node.ConfigGet(ctx, "maxclients").Result()
			if err != nil {
				t.Fatalf("CONFIG GET maxclients of %q: %v", s.node, err)
			}
			if want, _ := strconv.ParseInt(cfg["maxclients"], 10, 64); s.max != want || want == 0 {
				t.Errorf("max = %d; want %s (CONFIG GET of %s)", s.max, cfg["maxclients"], s.node)
			}
			if s.connected < 1 || s.connected > s.max {
				t.Errorf("connected = %d; want 1 to %d", s.connected, s.max)
			}
		})
	}
}

func TestParseInfoClients(t *testing.T) {
	s, err := parseInfoClients("n", map[string]string{"connected_clients": "9", "cluster_connections": "0", "maxclients": "10", "blocked_clients": "0"})
	if err != nil || s.connected != 9 || s.max != 10 || s.share() != 0.9 {
		t.Errorf("Redis 7 INFO: %+v, %v; want 9 of 10", s, err)
	}
	// Before Redis 7.0 INFO clients has no maxclients: no share, no warning.
	if s, err := parseInfoClients("n", map[string]string{"connected_clients": "9"}); err != nil || s.max != 0 || s.share() != 0 {
		t.Errorf("Redis 6 INFO: %+v, %v; want 9, max unknown", s, err)
	}
	for _, bad := range []map[string]string{nil, {"connected_clients": "x"}, {"connected_clients": "9", "maxclients": "x"}} {
		if _, err := parseInfoClients("n", bad); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestPresenceWarnsNearMaxclients: the instance heartbeat samples the
// server's clients into autodiag_redis_server_clients and warns once when
// they reach nearMaxclients of maxclients (past it Redis closes the pools'
// new connections at once, which the agent sees only as broken pipes),
// and says so again when they fall back. A server of the test's own:
// maxclients is changed.
func TestPresenceWarnsNearMaxclients(t *testing.T) {
	t.Parallel()
	srv, err := harness.StartRedis(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const maxclients = 10
	admin := srv.Client()
	defer admin.Close()
	if err := admin.ConfigSet(ctx, "maxclients", strconv.Itoa(maxclients)).Err(); err != nil {
		t.Fatal(err)
	}
	rc, err := NewRedisClient(config.RedisConfig{URL: "redis://" + srv.Addr}, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	var logs testenv.LockedBuffer
	p := &presence{store: state.NewRedis(rc, state.RedisOptions{Prefix: "autodiag-test:"}), storeTimeout: 2 * time.Second,
		drain: drain.New(drain.Config{}), outcomes: noneInFlight{}, m: newMetrics(nil, nil),
		log: slog.New(slog.NewJSONHandler(&logs, nil)), instanceID: "i-1", server: redisServerClients(rc)}
	gauge := func(kind string) float64 { return testutil.ToFloat64(p.m.redisServer.WithLabelValues(kind)) }
	beat := func() {
		p.serverAt = time.Time{} // a sample due at every beat here
		p.put(ctx, time.Minute)
		if !p.up.Load() {
			t.Fatalf("record write failed: %s", logs.String())
		}
	}
	beat()
	below := gauge(serverConnected)
	if below < 2 || gauge(serverMax) != maxclients {
		t.Fatalf("sampled connected %v, max %v; want ≥ 2 (the test's and the agent's), %d", below, gauge(serverMax), maxclients)
	}
	if strings.Contains(logs.String(), "near its maxclients") {
		t.Fatalf("warned at %v of %d: %s", below, maxclients, logs.String())
	}
	// Other clients take the server to its maxclients.
	var held []*redis.Client
	for range maxclients - int(below) {
		c := srv.Client()
		held = append(held, c)
		_ = c.Ping(ctx).Err() // the last ones may be refused: at maxclients
	}
	beat()
	if got := gauge(serverConnected); got < nearMaxclients*maxclients {
		t.Fatalf("sampled connected %v with the server full; want ≥ %v", got, nearMaxclients*maxclients)
	}
	beat() // still near: no second warning
	if n := strings.Count(logs.String(), "near its maxclients"); n != 1 {
		t.Fatalf("%d warnings near maxclients over two samples; want 1: %s", n, logs.String())
	}
	for _, c := range held {
		_ = c.Close()
	}
	if !harness.Until(10*time.Second, func() bool {
		beat()
		return gauge(serverConnected) < nearMaxclients*maxclients
	}) {
		t.Fatalf("connections still sampled at %v after the other clients closed", gauge(serverConnected))
	}
	if !strings.Contains(logs.String(), "below its maxclients again") {
		t.Fatalf("no word when the connections fell back: %s", logs.String())
	}
}

type noneInFlight struct{}

func (noneInFlight) InFlight() int { return 0 }
