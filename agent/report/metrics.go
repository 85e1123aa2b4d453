package report

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reports  *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	dead     *prometheus.CounterVec
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
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_report_jobs_dead_lettered_total",
			Help: "Report jobs ended failed and never claimed again, by provider and reason (panic, max_attempts, not_stored).",
		}, []string{"provider", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "autodiag_report_duration_seconds",
			Help:    "Time to generate one report, retries included.",
			Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120},
		}, []string{"provider"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.reports, m.tokens, m.dead, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("report: metrics: %w", err)
		}
	}
	return m, nil
}

// init starts every label set of provider at 0: each result, each
// dead-letter reason, each token kind.
func (m *metrics) init(provider string) {
	for _, st := range []string{StatusOK, StatusFailed, StatusRateLimited, StatusSkipped} {
		m.reports.WithLabelValues(provider, st)
	}
	for _, d := range DeadReasons {
		m.dead.WithLabelValues(provider, d)
	}
	m.tokens.WithLabelValues(provider, "input")
	m.tokens.WithLabelValues(provider, "output")
}

func (m *metrics) observe(provider string, r Result) {
	m.reports.WithLabelValues(provider, r.Status).Inc()
	if r.Attempts == 0 {
		return
	}
	// A counter panics on a negative Add; the providers refuse such
	// counts, and any other Writer's are not trusted either.
	m.tokens.WithLabelValues(provider, "input").Add(float64(max(r.InputTokens, 0)))
	m.tokens.WithLabelValues(provider, "output").Add(float64(max(r.OutputTokens, 0)))
	m.duration.WithLabelValues(provider).Observe(r.LatencyS)
}
