package alert

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"time"

	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/secret"
	"github.com/autodiag/autodiag/internal/configerr"
)

// ListenerConfig is the intake: section: the alert listener, which
// alerting systems post to, separate from the admin listener.
type ListenerConfig struct {
	// Addr is host:port to listen on; empty (the default) = no alert listener.
	Addr string     `yaml:"addr"`
	Auth AuthConfig `yaml:"auth"`
	TLS  TLSConfig  `yaml:"tls"`
	// MaxBody is the largest payload read (default 1MiB, at most 32MiB);
	// past it the answer is 413.
	MaxBody runner.Size `yaml:"max_body"`
	// Alertmanager is what the listener does about alerts an Alertmanager
	// left out of a notification.
	Alertmanager AlertmanagerConfig `yaml:"alertmanager"`
	// Slack is Slack's interactivity (POST /slack/interactions: the
	// Approve/Deny and 👍/👎 buttons); off without a signing secret.
	Slack SlackConfig `yaml:"slack"`
}

// SlackConfig is the intake.slack section: where Slack's signing secret
// is, and which Slack users may press which buttons. The endpoint is
// authenticated by the signature, not by intake.auth (Slack sends no
// other credential).
type SlackConfig struct {
	// SigningSecretEnv names the variable holding the Slack app's signing
	// secret.
	SigningSecretEnv string `yaml:"signing_secret_env"`
	// SigningSecretSecret is the signing secret's Secrets Manager secret
	// ARN or SSM SecureString name or ARN, instead of SigningSecretEnv.
	SigningSecretSecret string `yaml:"signing_secret_secret"`
	// Approvers are the Slack user ids (U…, W…) allowed to approve or deny
	// a task; empty = nobody.
	Approvers []string `yaml:"approvers"`
	// FeedbackUsers are the Slack user ids allowed to give a verdict
	// (👍/👎); empty = anyone whose request Slack signed, that is anyone in
	// a workspace the app is installed in.
	FeedbackUsers []string `yaml:"feedback_users"`
}

// Enabled reports whether the section names a signing secret.
func (s SlackConfig) Enabled() bool { return s.SigningSecretEnv != "" || s.SigningSecretSecret != "" }

// slackUserRE is a Slack user id.
var slackUserRE = regexp.MustCompile(`^[UW][A-Z0-9]{2,20}$`)

// problems are the section's problems, keys under section.
func (s SlackConfig) problems(section string) []error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, configerr.Errorf(configerr.JoinKey(section, key), format, args...))
	}
	if s.SigningSecretEnv != "" && !envNameRE.MatchString(s.SigningSecretEnv) {
		add("signing_secret_env", "must name an environment variable, got %q", s.SigningSecretEnv)
	}
	if s.SigningSecretEnv != "" && s.SigningSecretSecret != "" {
		add("signing_secret_secret", "set signing_secret_env or signing_secret_secret, not both")
	}
	if s.SigningSecretSecret != "" {
		if _, err := secret.ParseRef(s.SigningSecretSecret); err != nil {
			errs = append(errs, &configerr.Error{Key: configerr.JoinKey(section, "signing_secret_secret"), Err: err})
		}
	}
	if !s.Enabled() && (len(s.Approvers) > 0 || len(s.FeedbackUsers) > 0) {
		add("", "approvers and feedback_users need signing_secret_env or signing_secret_secret")
	}
	for _, l := range []struct {
		key string
		ids []string
	}{{"approvers", s.Approvers}, {"feedback_users", s.FeedbackUsers}} {
		for i, id := range l.ids {
			if !slackUserRE.MatchString(id) {
				add(fmt.Sprintf("%s[%d]", l.key, i), "must be a Slack user id (U… or W…, as in the user's profile), got %.40q", id)
			}
		}
	}
	return errs
}

// SigningSecret reads the signing secret through getenv (a secret.Store
// answers *_secret references), again at each call so that a rotated
// secret applies without a restart.
func (s SlackConfig) SigningSecret(getenv func(string) (string, bool)) (string, error) {
	key, name, what := "signing_secret_env", s.SigningSecretEnv, "environment variable"
	if s.SigningSecretSecret != "" {
		key, name, what = "signing_secret_secret", s.SigningSecretSecret, "secret"
	}
	v, ok := getenv(name)
	if !ok || v == "" {
		return "", configerr.Errorf(configerr.JoinKey("slack", key), "%s %s is unset or empty", what, name)
	}
	return v, nil
}

// AuthConfig names where the credentials are: environment variables or a
// secret store, so no secret sits in the file. At most one of the bearer
// token and basic.
type AuthConfig struct {
	// BearerTokenEnv names the variable holding the token requests send
	// as "Authorization: Bearer <token>".
	BearerTokenEnv string `yaml:"bearer_token_env"`
	// BearerTokenSecret is the token's Secrets Manager secret ARN or SSM
	// SecureString name or ARN, instead of BearerTokenEnv.
	BearerTokenSecret string    `yaml:"bearer_token_secret"`
	Basic             BasicAuth `yaml:"basic"`
}

// Enabled reports whether the section names a credential.
func (a AuthConfig) Enabled() bool {
	return a.bearer() != "" || a.Basic.User != "" || a.Basic.password() != ""
}

// bearer is where the token is read: the secret reference or the variable.
func (a AuthConfig) bearer() string { return cmp.Or(a.BearerTokenSecret, a.BearerTokenEnv) }

// SecretRefs are the secret references the section names.
func (a AuthConfig) SecretRefs() []string {
	var refs []string
	for _, r := range []string{a.BearerTokenSecret, a.Basic.PasswordSecret} {
		if r != "" {
			refs = append(refs, r)
		}
	}
	return refs
}

// Validate reports every problem of the section, each naming its key
// relative to it.
func (a AuthConfig) Validate() error { return errors.Join(a.problems("")...) }

// problems are the section's problems, keys under section.
func (a AuthConfig) problems(section string) []error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, configerr.Errorf(configerr.JoinKey(section, key), format, args...))
	}
	if a.BearerTokenEnv != "" && !envNameRE.MatchString(a.BearerTokenEnv) {
		add("bearer_token_env", "must name an environment variable, got %q", a.BearerTokenEnv)
	}
	if a.BearerTokenEnv != "" && a.BearerTokenSecret != "" {
		add("bearer_token_secret", "set bearer_token_env or bearer_token_secret, not both")
	}
	if a.BearerTokenSecret != "" {
		if _, err := secret.ParseRef(a.BearerTokenSecret); err != nil {
			errs = append(errs, &configerr.Error{Key: configerr.JoinKey(section, "bearer_token_secret"), Err: err})
		}
	}
	basic := a.Basic.User != "" || a.Basic.password() != ""
	if basic {
		if a.Basic.User == "" {
			add("basic.user", "must be set with basic.password_env or basic.password_secret")
		}
		switch {
		case a.Basic.PasswordEnv != "" && a.Basic.PasswordSecret != "":
			add("basic.password_secret", "set basic.password_env or basic.password_secret, not both")
		case a.Basic.PasswordSecret != "":
			if _, err := secret.ParseRef(a.Basic.PasswordSecret); err != nil {
				errs = append(errs, &configerr.Error{Key: configerr.JoinKey(section, "basic.password_secret"), Err: err})
			}
		case !envNameRE.MatchString(a.Basic.PasswordEnv):
			add("basic.password_env", "must name an environment variable, got %q", a.Basic.PasswordEnv)
		}
	}
	if a.bearer() != "" && basic {
		key := "bearer_token_env"
		if a.BearerTokenSecret != "" {
			key = "bearer_token_secret"
		}
		add("", "set %s or basic, not both", key)
	}
	return errs
}

// Credentials reads the secrets the section names through getenv
// (os.LookupEnv in cmd, which a secret.Store wraps to answer *_secret
// references); errors name keys relative to the section. A named variable
// or secret that is unset or empty is an error: a listener must not start
// open, nor a client go without them, because a secret is missing.
func (a AuthConfig) Credentials(getenv func(string) (string, bool)) (Credentials, error) {
	return a.credentials("", getenv)
}

// Live returns the credentials in force at each call, read again through
// getenv so that a rotated secret applies without a restart; initial (what
// Credentials returned at start) when a read fails, so a listener never
// opens because a value went missing.
func (a AuthConfig) Live(getenv func(string) (string, bool), initial Credentials) func() Credentials {
	return func() Credentials {
		cr, err := a.credentials("", getenv)
		if err != nil {
			return initial
		}
		return cr
	}
}

func (a AuthConfig) credentials(section string, getenv func(string) (string, bool)) (Credentials, error) {
	var cr Credentials
	read := func(envKey, secretKey, env, ref string) (string, error) {
		key, name, what := envKey, env, "environment variable"
		if ref != "" {
			key, name, what = secretKey, ref, "secret"
		}
		v, ok := getenv(name)
		if !ok || v == "" {
			return "", configerr.Errorf(configerr.JoinKey(section, key), "%s %s is unset or empty", what, name)
		}
		return v, nil
	}
	var err error
	switch {
	case a.bearer() != "":
		cr.BearerToken, err = read("bearer_token_env", "bearer_token_secret", a.BearerTokenEnv, a.BearerTokenSecret)
	case a.Basic.User != "":
		cr.BasicUser = a.Basic.User
		cr.BasicPassword, err = read("basic.password_env", "basic.password_secret", a.Basic.PasswordEnv, a.Basic.PasswordSecret)
	}
	if err != nil {
		return Credentials{}, err
	}
	return cr, nil
}

// BasicAuth is HTTP basic authentication (what Zabbix and Alertmanager's
// basic_auth send).
type BasicAuth struct {
	User string `yaml:"user"`
	// PasswordEnv names the variable holding the password.
	PasswordEnv string `yaml:"password_env"`
	// PasswordSecret is the password's Secrets Manager secret ARN or SSM
	// SecureString name or ARN, instead of PasswordEnv.
	PasswordSecret string `yaml:"password_secret"`
}

func (b BasicAuth) password() string { return cmp.Or(b.PasswordSecret, b.PasswordEnv) }

// TLSConfig turns on TLS when both files are set.
type TLSConfig struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Enabled reports whether both files are set.
func (t TLSConfig) Enabled() bool { return t.CertFile != "" && t.KeyFile != "" }

// Defaults and bounds of the intake: section.
const (
	DefaultMaxBody = 1 << 20
	minMaxBody     = 1 << 10
)

// Server timeouts: a slow or stalled client cannot hold a connection, and
// the write timeout leaves room for one SendBatch (DefaultSendTimeout).
const (
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	maxHeaderBytes           = 64 << 10
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Enabled reports whether an alert listener is configured.
func (c ListenerConfig) Enabled() bool { return c.Addr != "" }

// Validate reports every problem of the section, each naming its key
// relative to it. A listener reachable from other hosts without auth is
// an error: anyone who reaches it could start diagnostics on the fleet.
func (c ListenerConfig) Validate() error {
	var errs []error
	add := func(key, format string, a ...any) { errs = append(errs, configerr.Errorf(key, format, a...)) }
	if c.MaxBody != 0 && (c.MaxBody < minMaxBody || c.MaxBody > MaxBody) {
		add("max_body", "must be between %d and %d bytes, got %d", minMaxBody, MaxBody, c.MaxBody)
	}
	errs = append(errs, c.Auth.problems("auth")...)
	errs = append(errs, c.Alertmanager.problems("alertmanager")...)
	errs = append(errs, c.Slack.problems("slack")...)
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		add("tls", "cert_file and key_file go together")
	}
	if c.Addr == "" {
		return errors.Join(errs...)
	}
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		add("addr", "must be host:port: %w", err)
		return errors.Join(errs...)
	}
	if port == "" {
		add("addr", "must name a port, got %q", c.Addr)
	}
	if !Loopback(host) && !c.Auth.Enabled() {
		add("auth", "intake.addr %q is reachable from other hosts: set auth.bearer_token_env, auth.bearer_token_secret or auth.basic", c.Addr)
	}
	return errors.Join(errs...)
}

// Loopback reports whether host only accepts connections from this host.
// An empty host or 0.0.0.0 listens everywhere; a name other than
// localhost could resolve anywhere.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// Credentials reads the secrets the auth section names through getenv
// (os.LookupEnv in cmd). A named variable that is unset or empty is an
// error: the listener must not start open because a secret is missing.
func (c ListenerConfig) Credentials(getenv func(string) (string, bool)) (Credentials, error) {
	return c.Auth.credentials("auth", getenv)
}

// NewServer returns the alert listener's server for h, with timeouts that bound
// every phase of a request. The caller serves it with ListenAndServeTLS
// (c.TLS.CertFile, c.TLS.KeyFile) when c.TLS.Enabled(), ListenAndServe
// otherwise, and stops it with Shutdown when the agent drains.
func NewServer(c ListenerConfig, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              c.Addr,
		Handler:           h,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

// MaxBodyBytes is max_body with its default applied.
func (c ListenerConfig) MaxBodyBytes() int64 {
	if c.MaxBody == 0 {
		return DefaultMaxBody
	}
	return int64(c.MaxBody)
}
