package tracing

import (
	"strings"
	"testing"
)

// TestCollectorURLFromEnvironmentMeetsTheURLRules: a collector URL from
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT meets
// the rules tracing.endpoint meets: never the metadata service or a
// link-local address (Resolve), never the agent's own admin address
// (CheckSelf); each error names the variable, never the URL.
func TestCollectorURLFromEnvironmentMeetsTheURLRules(t *testing.T) {
	const self = "127.0.0.1:9464"
	tests := []struct {
		name, env, url, want string
	}{
		{"traces endpoint to own drain", EnvTracesEndpoint, "http://127.0.0.1:9464/v1/drain", "admin"},
		{"base endpoint to own admin", EnvEndpoint, "http://localhost:9464", "admin"},
		{"traces endpoint to metadata", EnvTracesEndpoint, "https://169.254.169.254/latest/", "metadata"},
		{"base endpoint to metadata name", EnvEndpoint, "https://metadata.google.internal", "metadata"},
		{"traces endpoint link-local", EnvTracesEndpoint, "https://[fe80::1]:4318/v1/traces", "link-local"},
		{"local collector", EnvTracesEndpoint, "http://127.0.0.1:4318/v1/traces", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) {
				if k == tt.env {
					return tt.url, true
				}
				return "", false
			}
			s, err := Resolve(DefaultConfig(), getenv, nil)
			if err == nil {
				err = s.CheckSelf(self)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.env)):
				t.Fatalf("got %v; want an error naming %s saying %q", err, tt.env, tt.want)
			case err != nil && strings.Contains(err.Error(), tt.url):
				t.Fatalf("the error quotes the URL: %v", err)
			}
		})
	}
}
