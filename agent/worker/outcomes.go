package worker

import "github.com/prometheus/client_golang/prometheus"

// Outcomes every task ends in exactly one of.
const (
	OutcomeSucceeded   = "succeeded"
	OutcomeFailed      = "failed"
	OutcomeTimedOut    = "timed_out"
	OutcomeRateLimited = "rate_limited"
	OutcomeRejected    = "rejected"
	OutcomeDuplicate   = "duplicate"
	OutcomeStale       = "stale"
	OutcomeReleased    = "released"
)

// UnknownDiagnostic labels the outcomes of tasks naming no diagnostic of
// the catalog (rejected before they run).
const UnknownDiagnostic = "unknown"

// Outcomes lists them in a stable order.
func Outcomes() []string {
	return []string{OutcomeSucceeded, OutcomeFailed, OutcomeTimedOut, OutcomeRateLimited,
		OutcomeRejected, OutcomeDuplicate, OutcomeStale, OutcomeReleased}
}

// Metrics are the task series the worker writes (README "Metrics"),
// registered by the agent with the rest of its own.
type Metrics struct {
	Received      prometheus.Counter
	Outcomes      *prometheus.CounterVec
	Duration      *prometheus.HistogramVec
	Inflight      prometheus.Gauge
	StateDegraded *prometheus.CounterVec
}
