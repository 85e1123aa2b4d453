package report

import (
	"math"
	"strings"
	"testing"
)

// A section built in code (not read from a file) is checked for NaN and
// infinities too: no range comparison refuses NaN by itself.
func TestConfigValidateRefusesNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		edit func(*Config)
		key  string
	}{
		{"temperature NaN", func(c *Config) { c.Temperature = nan }, "temperature"},
		{"temperature Inf", func(c *Config) { c.Temperature = inf }, "temperature"},
		{"daily cost NaN", func(c *Config) { c.Investigate = &InvestigateConfig{DailyCostUSD: nan} }, "investigate.daily_cost_usd"},
		{"price NaN", func(c *Config) {
			c.Investigate = &InvestigateConfig{Prices: map[string]Price{"m": {InputPerMTok: nan}}}
		}, "investigate.prices.m.input_per_mtok"},
		{"price -Inf", func(c *Config) {
			c.Investigate = &InvestigateConfig{Prices: map[string]Price{"m": {OutputPerMTok: -inf}}}
		}, "investigate.prices.m.output_per_mtok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.key+":") {
				t.Fatalf("got %v, want a problem of %s", err, tt.key)
			}
		})
	}
}

// A cost is always a finite, non-negative number, whatever the counts and
// prices: it is added to counters and stored as JSON.
func TestPriceCostIsFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		p       Price
		in, out int
		want    float64
	}{
		{Price{InputPerMTok: 3, OutputPerMTok: 15}, 1_000_000, 1_000_000, 18},
		{Price{InputPerMTok: nan, OutputPerMTok: 15}, 1_000_000, 1_000_000, 15},
		{Price{InputPerMTok: 3, OutputPerMTok: inf}, 1_000_000, 1_000_000, 3},
		{Price{InputPerMTok: -3, OutputPerMTok: 15}, 1_000_000, 1_000_000, 15},
		{Price{InputPerMTok: 3, OutputPerMTok: 15}, -5_000_000, 1_000_000, 15},
	}
	for _, tt := range tests {
		if got := tt.p.Cost(tt.in, tt.out); got != tt.want {
			t.Errorf("%+v.Cost(%d, %d) = %g, want %g", tt.p, tt.in, tt.out, got, tt.want)
		}
	}
}
