package investigate

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/report"
)

// Metrics are the investigation metrics; a nil *Metrics counts nothing.
type Metrics struct {
	investigations *prometheus.CounterVec
	steps          prometheus.Histogram
	calls          *prometheus.CounterVec
	tokens         *prometheus.CounterVec
	cost           *prometheus.CounterVec
	budgetTokens   prometheus.Gauge
	budgetCost     prometheus.Gauge
	citationsN     *prometheus.CounterVec
	unstructuredN  prometheus.Counter
}

// NewMetrics registers the metrics on reg with every label set the agent
// can produce at 0: each end × status, each call result, each direction
// of provider/model.
func NewMetrics(reg prometheus.Registerer, provider, model string) *Metrics {
	m := &Metrics{
		investigations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_investigations_total",
			Help: "Investigations by what ended the tool loop and the report's status."}, []string{"ended_by", "status"}),
		steps: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "autodiag_investigation_steps",
			Help: "Model turns of one investigation, the last without tools included.", Buckets: prometheus.LinearBuckets(1, 1, 21)}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_investigation_tool_calls_total",
			Help: "Tool calls by result: ran, or the refusal's reason."}, []string{"result"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_investigation_tokens_total",
			Help: "Model tokens of investigations by provider, model and direction (input, output)."}, []string{"provider", "model", "direction"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_investigation_cost_usd_total",
			Help: "Cost of investigations in US dollars by provider and model, from report.investigate.prices."}, []string{"provider", "model"}),
		budgetTokens: prometheus.NewGauge(prometheus.GaugeOpts{Name: "autodiag_investigation_daily_budget_tokens",
			Help: "report.investigate.daily_tokens: the fleet's tokens a day for investigations; 0 is none."}),
		budgetCost: prometheus.NewGauge(prometheus.GaugeOpts{Name: "autodiag_investigation_daily_budget_cost_usd",
			Help: "report.investigate.daily_cost_usd: the fleet's US dollars a day for investigations; 0 is none."}),
		citationsN: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_investigation_citations_total",
			Help: "Citations of investigation answers by the agent's check: verified, or why not."}, []string{"result"}),
		unstructuredN: prometheus.NewCounter(prometheus.CounterOpts{Name: "autodiag_investigation_unstructured_total",
			Help: "Investigation answers that were not of the schema after a corrective turn, stored as unchecked free text."}),
	}
	if reg != nil {
		reg.MustRegister(m.investigations, m.steps, m.calls, m.tokens, m.cost, m.budgetTokens, m.budgetCost, m.citationsN, m.unstructuredN)
	}
	for _, r := range report.CitationResults {
		m.citationsN.WithLabelValues(r)
	}
	for _, e := range EndReasons {
		for _, s := range []string{report.StatusOK, report.StatusFailed} {
			m.investigations.WithLabelValues(e, s)
		}
	}
	for _, r := range CallResults {
		m.calls.WithLabelValues(r)
	}
	m.tokens.WithLabelValues(provider, model, "input")
	m.tokens.WithLabelValues(provider, model, "output")
	m.cost.WithLabelValues(provider, model)
	return m
}

func (m *Metrics) turn(provider, model string, in, out int, cost float64) {
	if m == nil {
		return
	}
	// A counter panics on a negative Add and keeps a NaN for ever: the
	// providers refuse such counts and Price.Cost is finite, and a
	// Provider of another kind is not trusted either.
	m.tokens.WithLabelValues(provider, model, "input").Add(float64(max(in, 0)))
	m.tokens.WithLabelValues(provider, model, "output").Add(float64(max(out, 0)))
	if cost > 0 && !math.IsInf(cost, 0) {
		m.cost.WithLabelValues(provider, model).Add(cost)
	}
}

func (m *Metrics) citations(results []string) {
	if m == nil {
		return
	}
	for _, r := range results {
		m.citationsN.WithLabelValues(r).Inc()
	}
}

func (m *Metrics) unstructured() {
	if m == nil {
		return
	}
	m.unstructuredN.Inc()
}

func (m *Metrics) dropped(n int) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(ResultTooManyCalls).Add(float64(n))
}

func (m *Metrics) call(result string) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(result).Inc()
}

func (m *Metrics) end(endedBy, status string, steps int) {
	if m == nil {
		return
	}
	m.investigations.WithLabelValues(endedBy, status).Inc()
	m.steps.Observe(float64(steps))
}

// SetBudget exposes the daily budget, for panels that draw the spend
// against it.
func (m *Metrics) SetBudget(tokens int64, costUSD float64) {
	if m == nil {
		return
	}
	m.budgetTokens.Set(float64(tokens))
	m.budgetCost.Set(costUSD)
}
