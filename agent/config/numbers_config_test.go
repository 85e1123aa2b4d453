package config

import (
	"strings"
	"testing"
)

// Every float key refuses .nan and .inf (no range check catches NaN), and
// the money keys refuse negatives, each naming the key and its line.
func TestConfigRefusesNonFiniteNumbers(t *testing.T) {
	tests := []struct {
		name, yaml, key string
		line            int
	}{
		{"temperature nan", "report:\n  temperature: .nan\n", "report.temperature", 2},
		{"temperature inf", "report:\n  temperature: .inf\n", "report.temperature", 2},
		{"temperature -inf", "report:\n  temperature: -.Inf\n", "report.temperature", 2},
		{"price nan", "report:\n  investigate:\n    prices:\n      m1: {input_per_mtok: .nan, output_per_mtok: 1}\n",
			"report.investigate.prices.m1.input_per_mtok", 4},
		{"price inf", "report:\n  investigate:\n    prices:\n      m1:\n        input_per_mtok: 1\n        output_per_mtok: .inf\n",
			"report.investigate.prices.m1.output_per_mtok", 6},
		{"price negative", "report:\n  investigate:\n    prices:\n      m1:\n        input_per_mtok: -3\n",
			"report.investigate.prices.m1.input_per_mtok", 5},
		{"daily cost nan", "report:\n  investigate:\n    daily_cost_usd: .NaN\n", "report.investigate.daily_cost_usd", 3},
		{"daily cost inf", "report:\n  investigate:\n    daily_cost_usd: .inf\n", "report.investigate.daily_cost_usd", 3},
		{"max_percent nan", "limiter:\n  rules:\n    - name: r\n      limits:\n        - concurrency: {max_percent: .nan}\n",
			"limiter.rules[0].limits[0].concurrency.max_percent", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantProblemAt(t, tt.yaml, tt.key, tt.line) })
	}
}

// wantProblemAt fails t unless loading yaml reports one problem on key,
// at line.
func wantProblemAt(t *testing.T, yaml, key string, line int) {
	t.Helper()
	_, err := Load([]byte(yaml), nil)
	if err == nil {
		t.Fatal("accepted")
	}
	var found bool
	for _, ce := range Problems(err) {
		if ce.Key == key {
			found = true
			if ce.Line != line {
				t.Errorf("%s: line %d, want %d", ce.Key, ce.Line, line)
			}
		}
	}
	if !found {
		t.Errorf("no problem names %s: %v", key, err)
	}
	if strings.Count(err.Error(), key+" ") > 1 {
		t.Errorf("%s reported twice: %v", key, err)
	}
}
