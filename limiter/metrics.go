package limiter

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Decision label values of autodiag_limiter_decisions_total.
const (
	decisionAllowed   = "allowed"
	decisionDenied    = "denied"
	decisionDuplicate = "duplicate"
	// decisionShadowDenied counts a shadow rule's would-be denial (the
	// task's own decision is counted under its enforced rule).
	decisionShadowDenied = "shadow_denied"
)

var reasons = []string{
	ReasonAllowed, ReasonNoRule, ReasonDaily, ReasonMinInterval, ReasonWindow, ReasonRate,
	ReasonBlocked, ReasonDuplicate, ReasonDegradedOpen, ReasonDegradedClosed, ReasonBreakerOpen,
	ReasonConcurrency, ReasonConcurrencyPercent, ReasonFailing,
}

type metrics struct {
	decisions *prometheus.CounterVec
	degraded  prometheus.Counter
	rules     []string
	// cache[rule][reason][decision] holds resolved children, so the hot path
	// does not hash label values.
	cache [][][3]atomic.Pointer[prometheus.Counter]
}

func newMetrics(reg prometheus.Registerer, rules []string) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_limiter_decisions_total",
			Help: "Limiter decisions by matched rule (\"none\" when no rule matched), decision (allowed, denied, duplicate; shadow_denied for a shadow rule that would have denied) and reason.",
		}, []string{"rule", "decision", "reason"}),
		degraded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autodiag_limiter_degraded_total",
			Help: "Limiter decisions made by the fail mode because the backend failed, timed out or the circuit breaker was open.",
		}),
		rules: rules,
		cache: make([][][3]atomic.Pointer[prometheus.Counter], len(rules)),
	}
	for i := range m.cache {
		m.cache[i] = make([][3]atomic.Pointer[prometheus.Counter], len(reasons))
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.decisions, m.degraded} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("limiter: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

// observe counts decision d of rule number idx (0 = "none").
func (m *metrics) observe(idx int, d *Decision) {
	dec, di := decisionDenied, 1
	switch {
	case d.Duplicate:
		dec, di = decisionDuplicate, 2
	case d.Allowed:
		dec, di = decisionAllowed, 0
	}
	ri := -1
	for i, r := range reasons {
		if r == d.Reason {
			ri = i
			break
		}
	}
	if ri < 0 {
		m.decisions.WithLabelValues(m.rules[idx], dec, d.Reason).Inc()
		return
	}
	slot := &m.cache[idx][ri][di]
	c := slot.Load()
	if c == nil {
		cc := m.decisions.WithLabelValues(m.rules[idx], dec, d.Reason)
		c = &cc
		slot.Store(c)
	}
	(*c).Inc()
}

// observeShadow counts a would-be denial of shadow rule number idx.
func (m *metrics) observeShadow(idx int, reason string) {
	m.decisions.WithLabelValues(m.rules[idx], decisionShadowDenied, reason).Inc()
}
