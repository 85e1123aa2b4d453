package investigate

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A turn's counts and cost come from a model endpoint and the prices: a
// negative count or a NaN or infinite cost is not added (a counter panics
// on a negative Add and keeps a NaN for ever), and the agent stays up.
func TestMetricsTurnTakesNoImpossibleNumbers(t *testing.T) {
	tests := []struct {
		name    string
		in, out int
		cost    float64
	}{
		{"negative input", -1000, 5, 0.01},
		{"negative output", 5, -1000, 0.01},
		{"NaN cost", 5, 5, math.NaN()},
		{"Inf cost", 5, 5, math.Inf(1)},
		{"negative cost", 5, 5, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMetrics(prometheus.NewRegistry(), "openai", "m")
			m.turn("openai", "m", tt.in, tt.out, tt.cost)
			for _, dir := range []string{"input", "output"} {
				if v := testutil.ToFloat64(m.tokens.WithLabelValues("openai", "m", dir)); v < 0 || math.IsNaN(v) {
					t.Fatalf("%s tokens %g", dir, v)
				}
			}
			if v := testutil.ToFloat64(m.cost.WithLabelValues("openai", "m")); v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("cost %g", v)
			}
		})
	}
}
