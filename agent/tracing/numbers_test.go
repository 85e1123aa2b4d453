package tracing_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/configerr"
)

// The sampler ratio and the export timeout from the environment refuse
// NaN, infinities and numbers that overflow a time.Duration, naming the
// variable; a sampler_ratio of NaN built in code is refused too.
func TestTracingRefusesImpossibleNumbers(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		key  string
	}{
		{"ratio NaN", map[string]string{tracing.EnvSampler: "traceidratio", tracing.EnvSamplerArg: "NaN"}, tracing.EnvSamplerArg},
		{"ratio Inf", map[string]string{tracing.EnvSampler: "traceidratio", tracing.EnvSamplerArg: "+Inf"}, tracing.EnvSamplerArg},
		{"timeout overflow", map[string]string{tracing.EnvTracesTimeout: "9223372036855"}, tracing.EnvTracesTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			_, err := tracing.Resolve(tracing.DefaultConfig(), getenv, nil)
			var ce *configerr.Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("got %v, want a problem naming %s", err, tt.key)
			}
		})
	}
	c := tracing.DefaultConfig()
	c.SamplerRatio = math.NaN()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "sampler_ratio") {
		t.Fatalf("sampler_ratio NaN: %v", err)
	}
}
