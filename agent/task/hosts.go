package task

import (
	"errors"
	"fmt"
	"regexp"

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
	for i, p := range h.Allow {
		if _, err := regexp.Compile(p); err != nil {
			errs = append(errs, configerr.Errorf(fmt.Sprintf("allow[%d]", i), "invalid regexp: %w", err))
		}
	}
	return errors.Join(errs...)
}
