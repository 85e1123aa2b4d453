package report

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reports  *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_reports_total",
			Help: "Root-cause reports by provider and result (ok, failed, rate_limited, skipped).",
		}, []string{"provider", "result"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_report_tokens_total",
			Help: "Tokens the report provider counted, by kind (input, output).",
		}, []string{"provider", "kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "autodiag_report_duration_seconds",
			Help:    "Time to generate one report, retries included.",
			Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120},
		}, []string{"provider"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.reports, m.tokens, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("report: metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) observe(provider string, r Result) {
	m.reports.WithLabelValues(provider, r.Status).Inc()
	if r.Attempts == 0 {
		return
	}
	m.tokens.WithLabelValues(provider, "input").Add(float64(r.InputTokens))
	m.tokens.WithLabelValues(provider, "output").Add(float64(r.OutputTokens))
	m.duration.WithLabelValues(provider).Observe(r.LatencyS)
}
