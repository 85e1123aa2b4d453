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
