package task

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/autodiag/autodiag/internal/configerr"
)

// HostsConfig is the host allow-list of the configuration file (YAML key
// limiter.hosts, kept there for the operators who write it): which hosts a
// task may name. It is task validation's setting, applied before anything
// touches shared state, not the limiter's.
type HostsConfig struct {
	// Allow is the allow-list: regular expressions, a host must match one.
	// Empty is a configuration error: it would reject every task.
	Allow []string `yaml:"allow"`
	// AllowIPLiterals accepts a host that is a dotted-quad IPv4 address,
	// which must still match Allow; off, every IP literal is rejected
	// before the allow-list. Loopback, link-local (the instance metadata
	// service), unspecified addresses and localhost stay rejected either
	// way, so a diagnostic cannot be pointed at the instance's credentials.
	AllowIPLiterals bool `yaml:"allow_ip_literals"`
}

// Validate reports every problem at once, each a *configerr.Error whose key
// is relative to the hosts section ("allow[1]").
func (h HostsConfig) Validate() error {
	if len(h.Allow) == 0 {
		return configerr.Errorf("allow", "no pattern: every task would be rejected")
	}
	var errs []error
	v := Validator{AllowIPLiterals: h.AllowIPLiterals}
	for i, p := range h.Allow {
		re, err := regexp.Compile(p)
		if err != nil {
			errs = append(errs, configerr.Errorf(fmt.Sprintf("allow[%d]", i), "invalid regexp: %w", err))
			continue
		}
		if host, why := v.neverTarget(re); why != "" {
			errs = append(errs, configerr.Errorf(fmt.Sprintf("allow[%d]", i), "%q names %s, which can never be a target: %s", p, host, why))
		}
	}
	return errors.Join(errs...)
}

// neverTarget returns the host a literal pattern ("localhost",
// `^127\.0\.0\.1$`) names and why it is refused before the allow-list
// is looked at; why is "" when the pattern is not a literal host or its
// host can be a target. Such an entry is a mistake: it reads as allowing
// the host and allows nothing it was written for.
func (v Validator) neverTarget(re *regexp.Regexp) (host, why string) {
	src := strings.TrimSuffix(strings.TrimPrefix(re.String(), "^"), "$")
	lit, err := regexp.Compile(src)
	if err != nil {
		return "", ""
	}
	prefix, complete := lit.LiteralPrefix()
	if !complete || prefix == "" {
		return "", ""
	}
	h, err := NormalizeHost(prefix)
	if err != nil {
		return "", ""
	}
	var e *Error
	if err := v.checkTarget(h); errors.As(err, &e) {
		if e.Reason == ReasonIPLiteral {
			return h, "it is an IP literal and allow_ip_literals is off"
		}
		return h, fmt.Sprintf("every task naming it is rejected %s, whatever the allow-list says (%s)", e.Reason, e.Detail)
	}
	return "", ""
}
