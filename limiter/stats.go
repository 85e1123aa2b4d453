package limiter

import dto "github.com/prometheus/client_model/go"

// DegradedTotal is how many decisions the fail mode has made since New
// (autodiag_limiter_degraded_total), for publishers that report it
// elsewhere without knowing the metric's name.
func (l *Limiter) DegradedTotal() float64 {
	var m dto.Metric
	if err := l.metrics.degraded.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
