package notify

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/internal/urlcheck"
	"github.com/autodiag/autodiag/agent/secret"
	"github.com/autodiag/autodiag/internal/configerr"
)

// Sink types.
const (
	TypeSlack   = "slack"
	TypeWebhook = "webhook"
	// The write-back sinks: a note on the alert in the system it came
	// from (see docs/writeback.md).
	TypeZabbix    = "zabbix"
	TypePagerDuty = "pagerduty"
	TypeOpsgenie  = "opsgenie"
)

// Default API endpoints of the write-back sinks whose vendor has one; a
// zabbix sink names its own (url).
const (
	DefaultPagerDutyURL = "https://api.pagerduty.com"
	DefaultOpsgenieURL  = "https://api.opsgenie.com"
	DefaultSlackAPIURL  = "https://slack.com/api"
)

// Defaults and bounds of the notify keys.
const (
	DefaultTimeout = 10 * time.Second
	MaxTimeout     = 60 * time.Second
	DefaultMaxAge  = 24 * time.Hour
)

// SinkConfig is one entry of the notify list in the configuration file.
type SinkConfig struct {
	// Name labels the sink in metrics, logs and the outbox: lower case
	// letters, digits, - and _.
	Name string `yaml:"name"`
	// Type is slack (an incoming webhook, Block Kit) or webhook (POST of
	// the event as JSON).
	Type string `yaml:"type"`
	// URL is the endpoint when it holds no secret; a Slack webhook URL is
	// a secret and belongs in URLEnv. Exactly one of URL and URLEnv.
	URL string `yaml:"url"`
	// URLEnv names the environment variable holding the URL, read at start.
	URLEnv string `yaml:"url_env"`
	// URLSecret is the URL's Secrets Manager secret ARN or SSM SecureString
	// name or ARN, instead of URL and URLEnv; read at start and at each
	// secrets refresh.
	URLSecret string `yaml:"url_secret"`
	// SecretEnv names the environment variable holding the HMAC-SHA256 key;
	// with it every request carries X-Autodiag-Signature: sha256=<hex HMAC
	// of the raw body>. Empty: unsigned.
	SecretEnv string `yaml:"secret_env"`
	// SecretSecret is the HMAC key's secret ARN or SSM SecureString name
	// or ARN, instead of SecretEnv.
	SecretSecret string `yaml:"secret_secret"`
	// On lists the events the sink receives (at least one).
	On []EventType `yaml:"on"`
	// Timeout bounds one request, answer included (0: DefaultTimeout; at
	// most MaxTimeout).
	Timeout time.Duration `yaml:"timeout"`
	// AllowHTTP accepts an http:// URL; without it only https is sent to.
	AllowHTTP bool `yaml:"allow_http"`

	// TokenEnv names the environment variable holding the API token of a
	// zabbix, pagerduty or opsgenie sink; TokenSecret is its secret
	// reference instead. Exactly one for those types.
	TokenEnv    string `yaml:"token_env"`
	TokenSecret string `yaml:"token_secret"`
	// BotTokenEnv / BotTokenSecret hold a Slack bot token (xoxb-…): with
	// one, a slack sink posts with chat.postMessage to Channel and threads
	// an alert's events under its first message, instead of posting to an
	// incoming webhook.
	BotTokenEnv    string `yaml:"bot_token_env"`
	BotTokenSecret string `yaml:"bot_token_secret"`
	// Channel is the Slack channel id (C…) or name a bot-token sink posts to.
	Channel string `yaml:"channel"`
	// From is the email of the PagerDuty user notes are written as (the
	// From header the REST API requires).
	From string `yaml:"from"`
	// Version is the Zabbix server's version ("6.0", "7.0", …): before
	// 6.4 the token goes in the request body (auth), from 6.4 in an
	// Authorization: Bearer header. Empty: asked once with apiinfo.version.
	Version string `yaml:"version"`
	// Severity, for a zabbix sink, is the severity the acknowledgement
	// also sets (not_classified, information, warning, average, high,
	// disaster); empty: the severity is left alone.
	Severity string `yaml:"severity"`
}

// writeBack says whether c is a write-back sink: one that writes into the
// alert's own system and so needs an alert on the event.
func (c SinkConfig) writeBack() bool {
	return c.Type == TypeZabbix || c.Type == TypePagerDuty || c.Type == TypeOpsgenie
}

// slackBot says whether c is a slack sink with a bot token.
func (c SinkConfig) slackBot() bool {
	return c.Type == TypeSlack && (c.BotTokenEnv != "" || c.BotTokenSecret != "")
}

// zabbixSeverities are the names of Zabbix's severities, by their number.
var zabbixSeverities = []string{"not_classified", "information", "warning", "average", "high", "disaster"}

var zabbixVersion = regexp.MustCompile(`^[1-9][0-9]?\.[0-9]{1,2}(\.[0-9]{1,3})?$`)

// EffectiveTimeout is Timeout with its default applied.
func (c SinkConfig) EffectiveTimeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

var (
	validSinkName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	validEnvName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ValidateSinks reports every problem of a notify list at once, as
// *configerr.Error with keys relative to the list ("[1].url_env"). It does
// not read the environment (config validate runs where the secrets are
// not); NewSinks does.
func ValidateSinks(list []SinkConfig) error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, configerr.Errorf(key, format, args...))
	}
	seen := map[string]bool{}
	for i, c := range list {
		k := fmt.Sprintf("[%d]", i)
		switch {
		case c.Name == "":
			add(k+".name", "must be set")
		case !validSinkName.MatchString(c.Name):
			add(k+".name", "%q: use lower case letters, digits, - and _", c.Name)
		case seen[c.Name]:
			add(k+".name", "%q is used twice", c.Name)
		}
		seen[c.Name] = true
		switch c.Type {
		case TypeSlack, TypeWebhook, TypeZabbix, TypePagerDuty, TypeOpsgenie:
		default:
			add(k+".type", "%q: must be one of %s, %s, %s, %s, %s", c.Type, TypeSlack, TypeWebhook, TypeZabbix, TypePagerDuty, TypeOpsgenie)
		}
		errs = append(errs, validateWriteBack(k, c)...)
		switch n := countSet(c.URL, c.URLEnv, c.URLSecret); {
		case n == 0 && (c.slackBot() || c.Type == TypePagerDuty || c.Type == TypeOpsgenie):
			// The vendor's API endpoint.
		case n == 0:
			add(k+".url", "one of url and url_env (or url_secret) must be set")
		case n > 1 && c.URLSecret != "":
			add(k+".url_secret", "url, url_env and url_secret are exclusive")
		case n > 1:
			add(k+".url", "url and url_env are exclusive")
		case c.URL != "":
			if err := checkURL(c.URL, c.AllowHTTP); err != nil {
				errs = append(errs, &configerr.Error{Key: k + ".url", Err: err})
			} else if u, _ := url.Parse(c.URL); u.User != nil {
				add(k+".url", "holds credentials: put a URL with a secret in the environment (url_env)")
			} else if err := urlcheck.Check(c.URL, urlcheck.Rules{AllowHTTP: true}); err != nil {
				// Never the metadata service or a link-local address.
				errs = append(errs, &configerr.Error{Key: k + ".url", Err: err})
			}
		}
		if c.URLEnv != "" && !validEnvName.MatchString(c.URLEnv) {
			add(k+".url_env", "%q is not an environment variable name", c.URLEnv)
		}
		if c.SecretEnv != "" && !validEnvName.MatchString(c.SecretEnv) {
			add(k+".secret_env", "%q is not an environment variable name", c.SecretEnv)
		}
		if c.SecretEnv != "" && c.Type == TypeSlack {
			add(k+".secret_env", "Slack incoming webhooks do not check signatures; the URL is the secret")
		}
		if c.SecretEnv != "" && c.SecretSecret != "" {
			add(k+".secret_secret", "secret_env and secret_secret are exclusive")
		}
		if c.SecretSecret != "" && c.Type == TypeSlack {
			add(k+".secret_secret", "Slack incoming webhooks do not check signatures; the URL is the secret")
		}
		for _, kr := range [][2]string{{".url_secret", c.URLSecret}, {".secret_secret", c.SecretSecret}} {
			if kr[1] != "" {
				if _, err := secret.ParseRef(kr[1]); err != nil {
					errs = append(errs, &configerr.Error{Key: k + kr[0], Err: err})
				}
			}
		}
		if len(c.On) == 0 {
			add(k+".on", "must list at least one event")
		}
		for j, e := range c.On {
			if !e.valid() {
				add(fmt.Sprintf("%s.on[%d]", k, j), "%q: not one of %v", e, EventTypes)
			} else if c.writeBack() && e.drain() {
				add(fmt.Sprintf("%s.on[%d]", k, j), "%q: a %s sink writes on an alert; a drain has none", e, c.Type)
			}
		}
		if c.Timeout < 0 || c.Timeout > MaxTimeout {
			add(k+".timeout", "%s: must be between 0 (default %s) and %s", c.Timeout, DefaultTimeout, MaxTimeout)
		}
	}
	return errors.Join(errs...)
}

// validateWriteBack checks the keys of the write-back sinks and of a
// slack sink with a bot token, and that other sinks do not set them.
func validateWriteBack(k string, c SinkConfig) []error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, configerr.Errorf(k+key, format, args...))
	}
	for _, kv := range [][2]string{{".token_env", c.TokenEnv}, {".bot_token_env", c.BotTokenEnv}} {
		if kv[1] != "" && !validEnvName.MatchString(kv[1]) {
			add(kv[0], "%q is not an environment variable name", kv[1])
		}
	}
	for _, kv := range [][2]string{{".token_secret", c.TokenSecret}, {".bot_token_secret", c.BotTokenSecret}} {
		if kv[1] != "" {
			if _, err := secret.ParseRef(kv[1]); err != nil {
				errs = append(errs, &configerr.Error{Key: k + kv[0], Err: err})
			}
		}
	}
	only := func(key, val string, types ...string) {
		if val != "" && !slices.Contains(types, c.Type) {
			add(key, "applies to a sink of type %s only", strings.Join(types, " or "))
		}
	}
	only(".token_env", c.TokenEnv, TypeZabbix, TypePagerDuty, TypeOpsgenie)
	only(".token_secret", c.TokenSecret, TypeZabbix, TypePagerDuty, TypeOpsgenie)
	only(".bot_token_env", c.BotTokenEnv, TypeSlack)
	only(".bot_token_secret", c.BotTokenSecret, TypeSlack)
	only(".channel", c.Channel, TypeSlack)
	only(".from", c.From, TypePagerDuty)
	only(".version", c.Version, TypeZabbix)
	only(".severity", c.Severity, TypeZabbix)
	switch {
	case c.writeBack():
		switch countSet(c.TokenEnv, c.TokenSecret) {
		case 0:
			add(".token_env", "a %s sink needs its API token: token_env (or token_secret)", c.Type)
		case 2:
			add(".token_secret", "token_env and token_secret are exclusive")
		}
		if c.SecretEnv != "" || c.SecretSecret != "" {
			add(".secret_env", "a %s sink authenticates with its API token; it signs nothing", c.Type)
		}
	case c.Type == TypeSlack:
		if countSet(c.BotTokenEnv, c.BotTokenSecret) == 2 {
			add(".bot_token_secret", "bot_token_env and bot_token_secret are exclusive")
		}
		if c.slackBot() && c.Channel == "" {
			add(".channel", "a slack sink with a bot token needs the channel to post to")
		}
		if !c.slackBot() && c.Channel != "" {
			add(".channel", "an incoming webhook posts to its own channel: set bot_token_env to choose one")
		}
	}
	if c.Type == TypePagerDuty && (c.From == "" || !strings.Contains(c.From, "@")) {
		add(".from", "%q: a pagerduty sink needs the email of the user its notes are written as", c.From)
	}
	if c.Version != "" && !zabbixVersion.MatchString(c.Version) {
		add(".version", "%q: a Zabbix version such as 6.0 or 7.0", c.Version)
	}
	if c.Severity != "" && !slices.Contains(zabbixSeverities, c.Severity) {
		add(".severity", "%q: not one of %v", c.Severity, zabbixSeverities)
	}
	return errs
}

func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}

// SecretRefs are the secret references the sinks name.
func SecretRefs(list []SinkConfig) []string {
	var refs []string
	for _, c := range list {
		for _, r := range []string{c.URLSecret, c.SecretSecret, c.TokenSecret, c.BotTokenSecret} {
			if r != "" {
				refs = append(refs, r)
			}
		}
	}
	return refs
}

// ValidateMaxAge checks notify_max_age (0: DefaultMaxAge).
func ValidateMaxAge(d time.Duration) error {
	if d < 0 || (d > 0 && d < time.Minute) || d > 7*24*time.Hour {
		return configerr.Errorf("notify_max_age", "%s: must be between 1m and 168h (0: %s)", d, DefaultMaxAge)
	}
	return nil
}

// Bounds of notify_claim_idle.
const (
	MinClaimIdle = 2 * time.Second
	MaxClaimIdle = time.Hour
)

// ValidateClaimIdle checks notify_claim_idle (0: DefaultClaimIdle) against
// the sinks: a delivery must end within half the claim idle time, or
// another agent takes the entry over while it is still being sent.
func ValidateClaimIdle(d time.Duration, list []SinkConfig) error {
	if d == 0 {
		d = DefaultClaimIdle
	}
	if d < MinClaimIdle || d > MaxClaimIdle {
		return configerr.Errorf("notify_claim_idle", "%s: must be between %s and %s (0: %s)", d, MinClaimIdle, MaxClaimIdle, DefaultClaimIdle)
	}
	var errs []error
	for i, c := range list {
		if t := c.EffectiveTimeout(); 2*t > d {
			errs = append(errs, configerr.Errorf(fmt.Sprintf("notify[%d].timeout", i),
				"%s: must be at most half of notify_claim_idle (%s)", t, d))
		}
	}
	return errors.Join(errs...)
}

// CheckURL applies the outbound URL rules to a sink's URL however it is
// given (url, url_env, url_secret): https (http with allowHTTP), never the
// instance metadata service, a link-local address, or the agent's own
// admin listener (self, host:port; "" for none), which a sink could
// otherwise drive (POST /v1/drain). fromSecret says the URL is not from the
// file, so user:password@ in it is as secret as the rest and allowed. Its
// error never contains the URL.
func CheckURL(raw string, allowHTTP, fromSecret bool, self string) error {
	if err := checkURL(raw, allowHTTP); err != nil {
		return err
	}
	return urlcheck.Check(raw, urlcheck.Rules{AllowHTTP: true, AllowUserinfo: fromSecret, Self: self})
}

// checkURL accepts an absolute https URL (http with allowHTTP). Its error
// never contains the URL: it may come from a secret.
func checkURL(raw string, allowHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowHTTP:
	case u.Scheme == "http":
		return errors.New("http is not allowed: use https, or set allow_http: true")
	default:
		return errors.New("must be an https URL")
	}
	if u.Host == "" {
		return errors.New("has no host")
	}
	return nil
}

// Bounds of notify_outbox_max.
const (
	MinOutboxMax = 10
	MaxOutboxMax = 10_000_000
)

// ValidateOutboxMax checks notify_outbox_max (0: DefaultMaxLen).
func ValidateOutboxMax(n int) error {
	if n != 0 && (n < MinOutboxMax || n > MaxOutboxMax) {
		return configerr.Errorf("notify_outbox_max", "%d: must be between %d and %d (0: %d)", n, MinOutboxMax, MaxOutboxMax, DefaultMaxLen)
	}
	return nil
}
