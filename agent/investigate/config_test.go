package investigate

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/configerr"
)

// TestConfigValidate: keys left out take their defaults; each
// bound names its key under investigate.
func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	cases := []struct {
		c   Config
		key string
	}{
		{Config{MaxSteps: 21}, "investigate.max_steps"},
		{Config{CallsPerStep: 50}, "investigate.calls_per_step"},
		{Config{WallTime: 2 * time.Hour}, "investigate.wall_time"},
		{Config{MaxTokens: 10}, "investigate.max_tokens"},
		{Config{Hosts: "("}, "investigate.hosts"},
		{Config{ContextBytes: 10}, "investigate.context_bytes"},
		{Config{DailyCostUSD: -1}, "investigate.daily_cost_usd"},
	}
	for _, tc := range cases {
		err := tc.c.Validate()
		var ce *configerr.Error
		if !errors.As(err, &ce) || ce.Key != tc.key {
			t.Errorf("%+v: %v, want an error on %s", tc.c, err, tc.key)
		}
	}
}

// A section built in code (not read from a file) is checked for NaN and
// infinities too: no range comparison refuses NaN by itself.
func TestConfigValidateRefusesNonFinite(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		c    Config
		key  string
	}{
		{"daily cost NaN", Config{DailyCostUSD: nan}, "investigate.daily_cost_usd"},
		{"price NaN", Config{Prices: map[string]Price{"m": {InputPerMTok: nan}}}, "investigate.prices.m.input_per_mtok"},
		{"price -Inf", Config{Prices: map[string]Price{"m": {OutputPerMTok: -inf}}}, "investigate.prices.m.output_per_mtok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
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
