package alert

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts alerts by how they ended. One value serves the alert listener
// listener and the queue's receive path, so both count into the same
// series.
type Metrics struct {
	alerts    *prometheus.CounterVec
	truncated *prometheus.CounterVec
	fetches   *prometheus.CounterVec
}

// NewMetrics registers the alert metrics on reg (nil: unregistered, for
// tests that do not read them).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_alerts_total",
			Help: "Alerts received, by source and result (accepted, ignored, rejected); the reason is in the log line.",
		}, []string{"source", "result"}),
		truncated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_alerts_truncated_total",
			Help: "Alerts a sender left out of its payloads (Alertmanager truncatedAlerts, past its max_alerts).",
		}, []string{"source"}),
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_alerts_truncated_fetches_total",
			Help: "Fetches of the alerts an Alertmanager left out (intake.alertmanager.fetch_truncated), by result (ok, not_allowed, error).",
		}, []string{"result"}),
	}
	if reg != nil {
		reg.MustRegister(m.alerts, m.truncated, m.fetches)
	}
	for _, r := range FetchResults() {
		m.fetches.WithLabelValues(r)
	}
	// Every label set at 0 from the start: Prometheus sees a series
	// created at its first increment at its running value, and increase()
	// over it is 0.
	for _, s := range Sources() {
		for _, r := range []string{ResultAccepted, ResultIgnored, ResultRejected} {
			m.alerts.WithLabelValues(s, r)
		}
		m.truncated.WithLabelValues(s)
	}
	return m
}

func (m *Metrics) fetched(result string) {
	if m != nil {
		m.fetches.WithLabelValues(result).Inc()
	}
}

// Record counts and logs what a payload became: one log line per alert
// that made no task (reason and detail), one for the payload. source is
// the endpoint or queue shape (a bounded label), not what a generic
// sender calls itself.
func (m *Metrics) Record(ctx context.Context, log *slog.Logger, source string, p Payload, ans Answer) {
	if m != nil {
		m.alerts.WithLabelValues(source, ResultAccepted).Add(float64(ans.Accepted))
		m.alerts.WithLabelValues(source, ResultIgnored).Add(float64(len(ans.Ignored)))
		m.alerts.WithLabelValues(source, ResultRejected).Add(float64(len(ans.Rejected)))
		if p.Truncated > 0 {
			m.truncated.WithLabelValues(source).Add(float64(p.Truncated))
		}
	}
	if log == nil {
		return
	}
	for _, o := range ans.Ignored {
		log.LogAttrs(ctx, slog.LevelInfo, "alert ignored", slog.String("source", source), slog.Int("index", o.Index),
			slog.String("route", ans.Decisions[o.Index].Route), slog.String("outcome", ResultIgnored), slog.String("reason", o.Reason))
	}
	for _, o := range ans.Rejected {
		log.LogAttrs(ctx, slog.LevelWarn, "alert rejected", slog.String("source", source), slog.Int("index", o.Index),
			slog.String("route", ans.Decisions[o.Index].Route), slog.String("outcome", ResultRejected), slog.String("reason", o.Reason),
			slog.String("detail", o.Detail))
	}
	if p.Truncated > 0 {
		log.WarnContext(ctx, "alerts truncated by the sender", "source", source, "truncated", p.Truncated)
	}
	log.LogAttrs(ctx, slog.LevelInfo, "alerts routed", slog.String("source", source), slog.Int("accepted", ans.Accepted),
		slog.Int("ignored", len(ans.Ignored)), slog.Int("rejected", len(ans.Rejected)), slog.Int("tasks", len(ans.Tasks)))
}
