package agent

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/worker"
	"github.com/autodiag/autodiag/internal/outcome"
)

// metrics are the agent's own series (README "Metrics"); the limiter and
// lifecycle packages register theirs on the same registry.
type metrics struct {
	received      prometheus.Counter
	outcomes      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	inflight      prometheus.Gauge
	receiveWindow prometheus.Gauge
	drainState    prometheus.Gauge
	drainDuration prometheus.Gauge
	drainDeadline prometheus.Gauge
	redisUp       prometheus.Gauge
	// redisServer is INFO clients of the Redis node nearest its
	// maxclients, sampled by presence: {kind} connected and max.
	redisServer   *prometheus.GaugeVec
	stateDegraded *prometheus.CounterVec
	// routing counts where target tasks went (worker.RoutingResults).
	routing *prometheus.CounterVec
	// handoff is each handed task's delay from its receipt by the agent
	// that handed it to its start on this one (its host's agent).
	handoff prometheus.Histogram
	// ambiguousNames is how many of the agent's names another live agent
	// claims too.
	ambiguousNames prometheus.Gauge
}

// Operations counted by autodiag_state_degraded_total.
var stateOps = []string{"claim", "finish", "renew", "release", "audit", "mark"}

// newMetrics registers the agent's series on reg, every label set it can
// produce at 0: each diagnostic of the catalog (and
// worker.UnknownDiagnostic) × each outcome. A counter created at its first
// increment is first seen by Prometheus at its running value, so
// increase() over it is 0 and an alert built on it lies.
func newMetrics(reg prometheus.Registerer, diagnostics []string) *metrics {
	m := &metrics{
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autodiag_tasks_received_total",
			Help: "Task messages received from the queue (or POST /v1/tasks). A target task handed to its host's agent is counted once, by the agent that received it from the queue.",
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_task_outcomes_total",
			Help: "Tasks ended, by diagnostic and outcome; every task ends in exactly one outcome.",
		}, []string{"diagnostic", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "autodiag_task_duration_seconds",
			Help:    "Wall time of executed diagnostics.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"diagnostic"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autodiag_tasks_inflight",
			Help: "Tasks received and not yet ended (queued for a worker or running).",
		}),
		receiveWindow: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autodiag_tasks_receive_window",
			Help: "The most task messages received ahead of the end of their run: workers + max(1, workers/4), more while a backlog of short tasks is taken faster than one receive's round trip brings them (at most 2 x workers).",
		}),
		drainState: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autodiag_drain_state",
			Help: "0 running, 1 draining, 2 drained.",
		}),
		drainDuration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autodiag_drain_duration_seconds",
			Help: "Seconds since the drain started while draining; the drain's total once drained.",
		}),
		drainDeadline: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autodiag_drain_deadline_timestamp_seconds",
			Help: "Unix time of the drain's deadline (lifecycle.drain_timeout after its start, or earlier when the trigger says so); 0 before a drain.",
		}),
		redisServer: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "autodiag_redis_server_clients",
			Help: "Client connections of the Redis node nearest its maxclients, as its INFO clients says (kind: connected, max), sampled every minute; 0 without Redis.",
		}, []string{"kind"}),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autodiag_redis_up",
			Help: "1 when the state store answered its last ping (always 1 for in-memory state).",
		}),
		stateDegraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_state_degraded_total",
			Help: "Task state operations that could not reach the state store within redis.timeout, by operation; redis.state_fail decides what the task does.",
		}, []string{"op"}),
		routing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_task_routing_total",
			Help: "Target tasks (runs_on target) placed, by result: here (run by this agent), handed (to the agent of the task's host), waiting (no agent owns the host yet; deferred), or the reason it ended rejected unrun (no_agent_for_host, target_draining, target_standby, ambiguous_host, not_this_host).",
		}, []string{"result"}),
		handoff: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "autodiag_task_handoff_seconds",
			Help:    "Target tasks handed to this agent (the agent of their host): seconds from their receipt by the agent that handed them to the start of their diagnostic here.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		ambiguousNames: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autodiag_host_names_ambiguous",
			Help: "Host names of this agent that another live agent claims too, as of its last heartbeat: their host-local tasks end rejected (ambiguous_host) on every agent.",
		}),
	}
	for _, r := range worker.RoutingResults() {
		m.routing.WithLabelValues(r)
	}
	for _, op := range stateOps {
		m.stateDegraded.WithLabelValues(op)
	}
	m.redisServer.WithLabelValues(open.KindConnected)
	m.redisServer.WithLabelValues(open.KindMax)
	for _, d := range append(slices.Clone(diagnostics), worker.UnknownDiagnostic) {
		for _, o := range outcome.All() {
			m.outcomes.WithLabelValues(d, o)
		}
	}
	for _, d := range diagnostics {
		m.duration.WithLabelValues(d)
	}
	if reg != nil {
		reg.MustRegister(m.received, m.outcomes, m.duration, m.inflight, m.receiveWindow, m.drainState, m.drainDuration, m.drainDeadline, m.redisUp, m.stateDegraded, m.redisServer, m.routing, m.handoff, m.ambiguousNames)
	}
	return m
}
