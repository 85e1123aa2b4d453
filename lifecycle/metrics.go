package lifecycle

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the lifecycle counters (README "Metrics reference").
type metrics struct {
	heartbeats   *prometheus.CounterVec // autodiag_lifecycle_heartbeats_total{result}
	completions  *prometheus.CounterVec // autodiag_lifecycle_completions_total{result}
	sourceErrors *prometheus.CounterVec // autodiag_lifecycle_source_errors_total{source}
	orphaned     *prometheus.CounterVec // autodiag_lifecycle_orphaned_notifications_total{transition}
	handoffs     *prometheus.CounterVec // autodiag_lifecycle_handoffs_total{result}
}

// newMetrics registers the counters on reg (nil = unregistered). A counter
// already registered (a second Actor or Watcher on the same registry) is
// reused, so NewActor may be called once per drain.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "autodiag", Name: "lifecycle_heartbeats_total",
			Help: "RecordLifecycleActionHeartbeat attempts by result (ok, error, throttled, no_action).",
		}, []string{"result"}),
		completions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "autodiag", Name: "lifecycle_completions_total",
			Help: "CompleteLifecycleAction attempts by result (ok, error, throttled, no_action).",
		}, []string{"result"}),
		sourceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "autodiag", Name: "lifecycle_source_errors_total",
			Help: "Failed polls of a lifecycle trigger source (imds, sqs); retried with backoff.",
		}, []string{"source"}),
		orphaned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "autodiag", Name: "lifecycle_orphaned_notifications_total",
			Help: "Lifecycle notifications deleted from the queue because no agent claims their instance and their action's heartbeat timeout has passed, by transition (launching, terminating).",
		}, []string{"transition"}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "autodiag", Name: "lifecycle_handoffs_total",
			Help: "Terminating notices of other instances taken from the lifecycle queue and handed to their agents through Redis, by result (handed, no_agent, error; the last two made visible again).",
		}, []string{"result"}),
	}
	if reg != nil {
		m.heartbeats = register(reg, m.heartbeats)
		m.completions = register(reg, m.completions)
		m.sourceErrors = register(reg, m.sourceErrors)
		m.orphaned = register(reg, m.orphaned)
		m.handoffs = register(reg, m.handoffs)
	}
	for _, r := range handoffResults {
		m.handoffs.WithLabelValues(r)
	}
	return m
}

func register(reg prometheus.Registerer, c *prometheus.CounterVec) *prometheus.CounterVec {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing
			}
		}
		// A conflicting collector of another type: count privately rather
		// than fail the drain.
	}
	return c
}
