package tracing

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Parent sources, the values of the parent-invalid counter's source label.
const (
	SourceSQS  = "sqs"
	SourceHTTP = "http"
)

// Metrics count the exporter's work and the parents the carriers ignored.
// A nil *Metrics counts nothing.
type Metrics struct {
	SpansExported  prometheus.Counter
	SpansDropped   prometheus.Counter
	ExportErrors   prometheus.Counter
	ParentsInvalid *prometheus.CounterVec
}

// NewMetrics registers the tracing metrics on reg, every label set at 0.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		SpansExported: prometheus.NewCounter(prometheus.CounterOpts{Name: "autodiag_trace_spans_exported_total",
			Help: "Spans the OTLP exporter delivered to the collector."}),
		SpansDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "autodiag_trace_spans_dropped_total",
			Help: "Spans dropped because their export failed after its retries."}),
		ExportErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "autodiag_trace_export_errors_total",
			Help: "OTLP exports that failed after their retries."}),
		ParentsInvalid: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_trace_parent_invalid_total",
			Help: "Malformed traceparent or AWSTraceHeader values ignored (the task got a new trace), by source."}, []string{"source"}),
	}
	reg.MustRegister(m.SpansExported, m.SpansDropped, m.ExportErrors, m.ParentsInvalid)
	for _, s := range []string{SourceSQS, SourceHTTP} {
		m.ParentsInvalid.WithLabelValues(s)
	}
	return m
}

func (m *Metrics) exported(n int) {
	if m != nil {
		m.SpansExported.Add(float64(n))
	}
}

func (m *Metrics) dropped(n int) {
	if m != nil {
		m.SpansDropped.Add(float64(n))
	}
}

func (m *Metrics) exportFailed() {
	if m != nil {
		m.ExportErrors.Inc()
	}
}

// Invalid counts a malformed parent from source.
func (m *Metrics) Invalid(source string) {
	if m != nil {
		m.ParentsInvalid.WithLabelValues(source).Inc()
	}
}

// metrics are the process's tracing metrics, installed by Setup (like the
// tracer provider, one per process); nil counts nothing.
var metrics atomic.Pointer[Metrics]

// CountInvalid counts a malformed parent from source (SourceSQS,
// SourceHTTP), ignored: the task or request gets a trace of its own.
func CountInvalid(source string) { metrics.Load().Invalid(source) }
