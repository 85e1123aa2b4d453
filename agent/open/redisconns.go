package open

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/rediswait"
)

// Results of a dial, the {result} label of
// autodiag_redis_connections_opened_total.
const (
	dialOK    = "ok"
	dialError = "error"
)

// dialCounter counts the TCP connections the agent's go-redis client
// opens (every attempt, go-redis's own retries included). Each one that
// succeeds costs Redis a HELLO before its first command. An agent opens
// its pool's connections as its calls need them and keeps them, so after
// the first minutes the count stands still; a count that keeps rising is
// connections being closed and opened again (replies later than the read
// timeout, Redis restarting, a proxy cutting idle connections): a
// reconnect storm in the making when the whole fleet does it against a
// slow Redis. AutodiagRedisReconnecting alerts on it.
type dialCounter struct{ opened *prometheus.CounterVec }

func (d dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			d.opened.WithLabelValues(dialError).Inc()
		} else {
			d.opened.WithLabelValues(dialOK).Inc()
		}
		return c, err
	}
}

func (dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// WatchRedisConns registers autodiag_redis_connections_opened_total and
// autodiag_redis_connections for rc, and returns them: the connections
// opened (by result) and those open now, across every node of a Cluster;
// rc nil (no Redis) registers both, at 0.
func WatchRedisConns(rc redis.UniversalClient, reg prometheus.Registerer) (opened *prometheus.CounterVec, open prometheus.GaugeFunc) {
	d := dialCounter{opened: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "autodiag_redis_connections_opened_total",
		Help: "TCP connections to Redis the agent opened (each costs Redis a HELLO), by result (ok, error). Flat once the pool is full; rising means connections are being closed and opened again.",
	}, []string{"result"})}
	d.opened.WithLabelValues(dialOK)
	d.opened.WithLabelValues(dialError)
	switch c := rc.(type) {
	case nil: // in-memory state: registered all the same, at 0
	case *redis.ClusterClient:
		// A Cluster's hooks wrap its commands, not its nodes' dials: each
		// node's client gets the hook as it is made.
		c.OnNewNode(func(n *redis.Client) { n.AddHook(d) })
	default:
		rc.AddHook(d)
	}
	open = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "autodiag_redis_connections",
		Help: "Connections to Redis open now (in use and idle), across every node; 0 without Redis.",
	}, func() float64 {
		if rc == nil {
			return 0
		}
		return float64(rc.PoolStats().TotalConns)
	})
	if reg != nil {
		reg.MustRegister(d.opened, open)
	}
	return d.opened, open
}

// The {kind} label of autodiag_redis_server_clients.
const (
	KindConnected = "connected"
	KindMax       = "max"
)

// ServerClientsEvery is how often presence samples INFO clients: a
// fleet's pools fill over minutes, and 1,000 agents then send Redis 17
// INFO a second.
const ServerClientsEvery = time.Minute

// NearMaxclients is the share of maxclients at which the agent warns. A
// Redis at maxclients accepts a connection, answers its first command
// with an error and closes it: the agent sees only "broken pipe" or
// "connection reset", and redials.
const NearMaxclients = 0.9

// ServerClients is what INFO clients says of one Redis node.
type ServerClients struct {
	Node           string
	Connected, Max int64
}

// Share is connected over maxclients; 0 when maxclients is unknown.
func (s ServerClients) Share() float64 {
	if s.Max <= 0 {
		return 0
	}
	return float64(s.Connected) / float64(s.Max)
}

// parseInfoClients reads connected_clients and maxclients (Redis 7.0 and
// later; 0 before) from the Clients section of INFO, as go-redis's InfoMap
// splits it.
func parseInfoClients(node string, clients map[string]string) (ServerClients, error) {
	s := ServerClients{Node: node}
	if _, ok := clients["connected_clients"]; !ok {
		return s, fmt.Errorf("INFO clients of %s: no connected_clients", node)
	}
	for k, p := range map[string]*int64{"connected_clients": &s.Connected, "maxclients": &s.Max} {
		v, ok := clients[k]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return s, fmt.Errorf("INFO clients of %s: %s: %w", node, k, err)
		}
		*p = n
	}
	return s, nil
}

// RedisServerClients returns the sampler presence calls: INFO clients of
// every node (each master of a Cluster), the one nearest its maxclients.
// It stops waiting when ctx ends (a late reply keeps its connection, as
// every Redis call of the agent does).
func RedisServerClients(rc redis.UniversalClient) func(context.Context) (ServerClients, error) {
	w := rediswait.For(rc)
	return func(ctx context.Context) (ServerClients, error) {
		return rediswait.Do(ctx, w, func(ctx context.Context) (ServerClients, error) {
			var mu sync.Mutex
			var top ServerClients
			first := true
			one := func(ctx context.Context, c *redis.Client) error {
				info, err := c.InfoMap(ctx, "clients").Result()
				if err != nil {
					return err
				}
				s, err := parseInfoClients(c.Options().Addr, info["Clients"])
				if err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if first || s.Share() > top.Share() {
					top, first = s, false
				}
				return nil
			}
			var err error
			if cc, ok := rc.(*redis.ClusterClient); ok {
				err = cc.ForEachMaster(ctx, one)
			} else if c, ok := rc.(*redis.Client); ok {
				err = one(ctx, c)
			} else {
				err = fmt.Errorf("INFO clients: %T is not a client of one server or a Cluster", rc)
			}
			return top, err
		})
	}
}
