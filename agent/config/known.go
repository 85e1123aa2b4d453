package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/autodiag/autodiag/internal/configerr"
)

// RedactSection is the `redact:` section: what is redacted beside the
// rules of results.redact.
type RedactSection struct {
	// ValuesEnv names environment variables whose values are redacted
	// wherever they occur in output, by exact value and in their URL,
	// JSON and base64 forms (values shorter than redact.MinKnownLen
	// excepted), like the credentials the agent reads itself. A variable
	// that is unset or empty adds nothing.
	ValuesEnv []string `yaml:"values_env"`
}

// Validate checks that every name is an environment variable name.
func (s RedactSection) Validate() error {
	var errs []error
	for i, n := range s.ValuesEnv {
		if !envName(n) {
			errs = append(errs, configerr.Errorf(fmt.Sprintf("values_env[%d]", i), "%q is not an environment variable name", n))
		}
	}
	return errors.Join(errs...)
}

func envName(n string) bool {
	if n == "" {
		return false
	}
	for i, c := range n {
		if !(c == '_' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// credentialNames are the environment variables and secret references of
// every credential the configuration makes the agent read, and the
// variables of redact.values_env.
func (c Config) credentialNames() []string {
	names := []string{c.AdminAuth.BearerTokenEnv, c.AdminAuth.Basic.PasswordEnv,
		c.Intake.Auth.BearerTokenEnv, c.Intake.Auth.Basic.PasswordEnv, c.Intake.Slack.SigningSecretEnv}
	for _, n := range c.Notify {
		names = append(names, n.URLEnv, n.SecretEnv)
	}
	if c.Report.Enabled {
		names = append(names, c.Report.APIKeyEnv)
	}
	names = append(names, c.SecretRefs()...)
	names = append(names, c.Redact.ValuesEnv...)
	out := names[:0]
	for _, n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// KnownValues is the source of redact.Redactor.SetKnown: the current
// values of every credential the agent holds (its *_env variables and
// *_secret references, read through lookup, so a refreshed secret counts
// from its refresh on), the variables of redact.values_env, the password
// of redis.url, and each value of a key=value,… header list (the OTLP
// exporter's headers).
func (c Config) KnownValues(lookup func(string) (string, bool)) func() []string {
	names := c.credentialNames()
	var static []string
	if u, err := url.Parse(c.Redis.URL); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok {
			static = append(static, p)
		}
	}
	return func() []string {
		out := append([]string(nil), static...)
		if lookup == nil {
			return out
		}
		for _, n := range names {
			v, ok := lookup(n)
			if !ok || v == "" {
				continue
			}
			out = append(out, v)
			if strings.Contains(v, "=") && !strings.Contains(v, "://") {
				for _, kv := range strings.Split(v, ",") {
					if _, val, ok := strings.Cut(kv, "="); ok {
						out = append(out, strings.TrimSpace(val))
					}
				}
			}
		}
		return out
	}
}
