package worker

import "github.com/prometheus/client_golang/prometheus"

// UnknownDiagnostic labels the outcomes of tasks naming no diagnostic of
// the catalog (rejected before they run).
const UnknownDiagnostic = "unknown"

// Metrics are the task series the worker writes (README "Metrics"),
// registered by the agent with the rest of its own.
type Metrics struct {
	Received      prometheus.Counter
	Outcomes      *prometheus.CounterVec
	Duration      *prometheus.HistogramVec
	Inflight      prometheus.Gauge
	StateDegraded *prometheus.CounterVec
	// ReceiveWindow is the receive window's current size (window.go);
	// nil = not exported.
	ReceiveWindow prometheus.Gauge
	// Handoff observes each handed task's delay from its receipt by the
	// agent that handed it to its start here; nil = not observed.
	Handoff prometheus.Observer
}
