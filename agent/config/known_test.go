package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/notify"
)

func TestRedactValuesEnvValidate(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"APP_DB_PASSWORD", "_X1"}, ""},
		{[]string{"OK", "1BAD"}, "values_env[1]"},
		{[]string{""}, "values_env[0]"},
		{[]string{"has space"}, "values_env[0]"},
	} {
		err := RedactSection{ValuesEnv: tc.names}.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.names, err, tc.want)
		}
	}
}

// The known values are every credential the configuration reads, through
// the lookup (so a refreshed secret is the new value), the variables of
// redact.values_env, the password of redis.url and each header value.
func TestKnownValues(t *testing.T) {
	c := DefaultConfig()
	c.AdminAuth = alert.AuthConfig{BearerTokenEnv: "ADMIN_TOKEN"}
	c.Notify = []notify.SinkConfig{{Name: "hook", URLEnv: "HOOK_URL", SecretSecret: "/autodiag/hook-key"}}
	c.Tracing.HeadersSecret = "/autodiag/otlp-headers"
	c.Redact.ValuesEnv = []string{"APP_DB_PASSWORD", "UNSET"}
	c.Redis.URL = "redis://:r3dis-pass-word@cache:6379/0"
	env := map[string]string{
		"ADMIN_TOKEN": "admin-token-1", "HOOK_URL": "https://hooks.example/abc", "/autodiag/hook-key": "hmac-key-1",
		"/autodiag/otlp-headers": "x-api-key=otlp-key-123,x-team=ops", "APP_DB_PASSWORD": "db-pass-1", "UNRELATED": "nope",
	}
	lookup := func(n string) (string, bool) { v, ok := env[n]; return v, ok }
	got := c.KnownValues(lookup)()
	for _, want := range []string{"admin-token-1", "https://hooks.example/abc", "hmac-key-1", "otlp-key-123", "db-pass-1", "r3dis-pass-word"} {
		if !slices.Contains(got, want) {
			t.Errorf("%q missing from %q", want, got)
		}
	}
	if slices.Contains(got, "nope") {
		t.Errorf("a variable nobody named is a known value: %q", got)
	}
	env["/autodiag/hook-key"] = "hmac-key-2"
	if got := c.KnownValues(lookup)(); !slices.Contains(got, "hmac-key-2") {
		t.Errorf("after a refresh: %q", got)
	}
}
