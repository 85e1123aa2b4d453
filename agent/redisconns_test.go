package agent

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/harness"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestPresenceWarnsNearMaxclients: the instance heartbeat samples the
// server's clients into autodiag_redis_server_clients and warns once when
// they reach open.NearMaxclients of maxclients (past it Redis closes the pools'
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
	rc, err := open.RedisClient(config.RedisConfig{URL: "redis://" + srv.Addr}, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Close() })
	var logs testenv.LockedBuffer
	p := &presence{store: state.NewRedis(rc, state.RedisOptions{Prefix: "autodiag-test:"}), storeTimeout: 2 * time.Second,
		drain: drain.New(drain.Config{}), outcomes: noneInFlight{}, m: newMetrics(nil, nil),
		log: slog.New(slog.NewJSONHandler(&logs, nil)), instanceID: "i-1", server: open.RedisServerClients(rc)}
	gauge := func(kind string) float64 { return testutil.ToFloat64(p.m.redisServer.WithLabelValues(kind)) }
	beat := func() {
		p.serverAt = time.Time{} // a sample due at every beat here
		p.put(ctx, time.Minute)
		if !p.redisUp() {
			t.Fatalf("record write failed: %s", logs.String())
		}
	}
	beat()
	below := gauge(open.KindConnected)
	if below < 2 || gauge(open.KindMax) != maxclients {
		t.Fatalf("sampled connected %v, max %v; want ≥ 2 (the test's and the agent's), %d", below, gauge(open.KindMax), maxclients)
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
	if got := gauge(open.KindConnected); got < open.NearMaxclients*maxclients {
		t.Fatalf("sampled connected %v with the server full; want ≥ %v", got, open.NearMaxclients*maxclients)
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
		return gauge(open.KindConnected) < open.NearMaxclients*maxclients
	}) {
		t.Fatalf("connections still sampled at %v after the other clients closed", gauge(open.KindConnected))
	}
	if !strings.Contains(logs.String(), "below its maxclients again") {
		t.Fatalf("no word when the connections fell back: %s", logs.String())
	}
}

// noneInFlight is a worker with nothing in flight.
type noneInFlight struct{}

func (noneInFlight) InFlight() int { return 0 }
