package config

import (
	"slices"
	"strings"
	"testing"
)

// TestConfigTracing: the tracing section is off by default, its problems
// name the key and the line, and its headers secret is read with the
// others.
func TestConfigTracing(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	cfg, err := Load(nil, none)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.Endpoint != "" || cfg.Tracing.SamplerRatio != 1 || cfg.Tracing.Compression != "none" {
		t.Errorf("defaults %+v, want off, ratio 1, no compression", cfg.Tracing)
	}
	cfg, err = Load([]byte("tracing:\n  endpoint: https://otel:4318\n  headers_secret: /autodiag/otlp\n"), none)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.SecretRefs(), "/autodiag/otlp") {
		t.Errorf("SecretRefs %v lack tracing.headers_secret", cfg.SecretRefs())
	}
	for _, tc := range []struct{ yaml, want string }{
		{"tracing:\n  endpoint: https://169.254.169.254/\n", "tracing.endpoint (line 2): points at the instance metadata service"},
		{"tracing:\n  endpoint: http://collector.internal:4318\n", "tracing.endpoint (line 2): http is not allowed"},
		{"tracing:\n  endpoint: https://u:p@collector:4318\n", "tracing.endpoint (line 2): holds credentials"},
		{"workers: 2\ntracing:\n  sampler_ratio: 2\n", "tracing.sampler_ratio (line 3): must be between 0 and 1"},
		{"tracing:\n  link_template: https://tempo/x\n", "tracing.link_template (line 2): must contain {trace_id}"},
		{"tracing:\n  endpoints: x\n", "tracing.endpoints (line 2)"},
	} {
		_, err := Load([]byte(tc.yaml), none)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%q) = %v, want %q", tc.yaml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "u:p@") {
			t.Errorf("the error quotes the URL: %v", err)
		}
	}
}
