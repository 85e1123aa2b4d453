package agent

import (
	"context"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
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

// watchRedisConns registers autodiag_redis_connections_opened_total and
// autodiag_redis_connections for rc, and returns them: the connections
// opened (by result) and those open now, across every node of a Cluster;
// rc nil (no Redis) registers both, at 0.
func watchRedisConns(rc redis.UniversalClient, reg prometheus.Registerer) (opened *prometheus.CounterVec, open prometheus.GaugeFunc) {
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
