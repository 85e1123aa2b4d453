package report

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/autodiag/autodiag/agent/internal/urlcheck"
	"github.com/autodiag/autodiag/agent/internal/utf8cut"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/secret"
	"github.com/autodiag/autodiag/internal/configerr"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// Providers.
const (
	ProviderBedrock = "bedrock"
	ProviderOpenAI  = "openai"
)

// Config is the `report:` section of the configuration file. DefaultConfig
// gives the value of every field left out.
type Config struct {
	// Enabled turns reports on; nothing is sent anywhere unless it is set.
	Enabled bool `yaml:"enabled"`
	// Provider is "bedrock" or "openai" (any OpenAI-compatible server).
	Provider string `yaml:"provider"`
	// Model is the Bedrock model id or inference profile, or the OpenAI
	// model name.
	Model string `yaml:"model"`
	// BaseURL is the openai provider's endpoint, e.g. http://vllm:8000/v1.
	BaseURL string `yaml:"base_url"`
	// AllowHTTP accepts a plain http:// BaseURL to any host; without it
	// http is accepted to a loopback host only (a local model server).
	AllowHTTP bool `yaml:"allow_http"`
	// APIKeyEnv names the environment variable holding the openai
	// provider's key; the key itself is never in the file.
	APIKeyEnv string `yaml:"api_key_env"`
	// APIKeySecret is the key's Secrets Manager secret ARN or SSM
	// SecureString name or ARN, instead of APIKeyEnv; read at start and at
	// each secrets refresh.
	APIKeySecret string `yaml:"api_key_secret"`
	// On are the task outcomes that get a report.
	On []string `yaml:"on"`
	// Temperature and MaxTokens are sent with every request.
	Temperature float64 `yaml:"temperature"`
	MaxTokens   int     `yaml:"max_tokens"`
	// Timeout bounds one report, retries included.
	Timeout time.Duration `yaml:"timeout"`
	// Workers is how many reports are generated at once by one agent,
	// apart from the diagnostic workers.
	Workers int `yaml:"workers"`
	// Input bounds the output tail put in the prompt.
	Input Input `yaml:"input"`
	// Limits are the limits of one limiter rule keyed by host+diagnostic.
	Limits []limiter.Limit `yaml:"limits"`
	// Unlimited says, explicitly, that reports have no limits: without it
	// an enabled section with empty limits is refused.
	Unlimited bool `yaml:"unlimited"`
	// Guardrail is applied by Bedrock when ID is set.
	Guardrail Guardrail `yaml:"guardrail"`
	// MaxAge is how long a job may wait in the queue; older ones end skipped.
	MaxAge time.Duration `yaml:"max_age"`
	// MaxAnswerBytes bounds the model's answer: longer text is cut and
	// marked, a body far past it is not read (answer_too_large).
	MaxAnswerBytes runner.Size `yaml:"max_answer_bytes"`
	// Categories are added to DefaultCategories: the taxonomy an
	// investigation's answer takes its category from.
	Categories []string `yaml:"categories"`
	// Runbooks map an alert (name or label patterns) to a local Markdown
	// file given to an investigation's model.
	Runbooks []Runbook `yaml:"runbooks"`
}

// AllCategories is the taxonomy of this config: DefaultCategories and
// report.categories.
func (c Config) AllCategories() []string { return Categories(c.Categories) }

// AnswerCap is MaxAnswerBytes as an int; 0 (a config built in code
// without it) is DefaultMaxAnswerBytes.
func (c Config) AnswerCap() int {
	if c.MaxAnswerBytes <= 0 {
		return DefaultMaxAnswerBytes
	}
	return int(c.MaxAnswerBytes)
}

// maxAnswerBytesLimit is the largest report.max_answer_bytes: an answer is
// kept in the task record and sent to every sink.
const maxAnswerBytesLimit = 1 << 20

// validateAnswer checks the keys that bound the model's answer.
func (c Config) validateAnswer() error {
	if c.MaxAnswerBytes < 1<<10 || c.MaxAnswerBytes > maxAnswerBytesLimit {
		return configerr.Errorf("max_answer_bytes", "must be within [1KiB, 1MiB], got %d", c.MaxAnswerBytes)
	}
	return nil
}

// Input bounds the output tail in the prompt: the last MaxLines lines, cut
// further to the last MaxBytes bytes.
type Input struct {
	MaxLines int         `yaml:"max_lines"`
	MaxBytes runner.Size `yaml:"max_bytes"`
}

// Guardrail is a Bedrock guardrail; empty ID means none.
type Guardrail struct {
	ID      string `yaml:"id"`
	Version string `yaml:"version"`
}

// Outcomes a report can be asked for.
var outcomes = []string{outcome.Succeeded, outcome.Failed, outcome.TimedOut}

// DefaultConfig is the section when the file leaves it out:
//
//	report:
//	  enabled: false
//	  provider: bedrock
//	  model: amazon.nova-lite-v1:0
//	  on: [failed, timed_out]
//	  temperature: 0.2
//	  max_tokens: 1024
//	  timeout: 60s
//	  workers: 2
//	  input: {max_lines: 200, max_bytes: 16KiB}
//	  limits: [{min_interval: 3m}, {daily: 100}]
//	  guardrail: {id: "", version: ""}
//	  max_age: 1h
//	  max_answer_bytes: 64KiB
func DefaultConfig() Config {
	return Config{
		Provider:       ProviderBedrock,
		Model:          "amazon.nova-lite-v1:0",
		On:             []string{outcome.Failed, outcome.TimedOut},
		Temperature:    0.2,
		MaxTokens:      1024,
		Timeout:        60 * time.Second,
		Workers:        2,
		Input:          Input{MaxLines: 200, MaxBytes: 16 << 10},
		Limits:         []limiter.Limit{{MinInterval: 3 * time.Minute}, {Daily: 100}},
		MaxAge:         time.Hour,
		MaxAnswerBytes: DefaultMaxAnswerBytes,
	}
}

// Wants reports whether a task that ended with outcome gets a report.
func (c Config) Wants(outcome string) bool { return c.Enabled && slices.Contains(c.On, outcome) }

// Validate reports every problem of the section at once, each a
// *configerr.Error whose key is relative to the section. A disabled
// section is checked only for values that could never work.
func (c Config) Validate() error {
	var errs []error
	add := func(key, format string, a ...any) { errs = append(errs, configerr.Errorf(key, format, a...)) }
	switch c.Provider {
	case ProviderBedrock, ProviderOpenAI:
	default:
		add("provider", "must be %q or %q, got %q", ProviderBedrock, ProviderOpenAI, c.Provider)
	}
	if c.Enabled {
		if c.Model == "" {
			add("model", "must be set when report.enabled is true")
		}
		if c.Provider == ProviderOpenAI && c.BaseURL == "" {
			add("base_url", "must be set for provider %q", ProviderOpenAI)
		}
		if c.Provider == ProviderOpenAI && c.APIKeyEnv == "" && c.APIKeySecret == "" {
			add("api_key_env", "must name the environment variable holding the key for provider %q (or set api_key_secret)", ProviderOpenAI)
		}
		// Every report is a budget: a section without limits would spend
		// without bound.
		if len(c.Limits) == 0 && !c.Unlimited {
			add("limits", "must hold at least one limit (the defaults are min_interval: 3m and daily: 100), or set report.unlimited: true")
		}
	}
	if c.Unlimited && len(c.Limits) > 0 {
		add("unlimited", "is set but limits hold %d limits (the defaults apply when limits is left out): set limits: [] with unlimited: true", len(c.Limits))
	}
	// The notify URL rules: https (http only to a local model server
	// unless allow_http), no user:password@, never the metadata service or
	// a link-local address.
	if c.BaseURL != "" {
		if err := urlcheck.Check(c.BaseURL, urlcheck.Rules{AllowHTTP: c.AllowHTTP, AllowHTTPLoopback: true}); err != nil {
			if errors.Is(err, urlcheck.ErrHTTP) {
				// The way out, for a model server on a private network.
				err = fmt.Errorf("%w, or set report.allow_http: true for a model server reached over a private network", err)
			}
			errs = append(errs, &configerr.Error{Key: "base_url", Err: err})
		}
	}
	// Upper bounds: a value beyond them is a typo or a bill.
	const (
		maxMaxTokens = 100_000
		maxTimeout   = 10 * time.Minute
		maxWorkers   = 64
		maxLines     = 100_000
		maxBytes     = 1 << 20
		maxAge       = 7 * 24 * time.Hour
	)
	if c.MaxTokens > maxMaxTokens {
		add("max_tokens", "must be at most %d, got %d", maxMaxTokens, c.MaxTokens)
	}
	if c.Timeout > maxTimeout {
		add("timeout", "must be at most %s, got %s", maxTimeout, c.Timeout)
	}
	if c.Workers > maxWorkers {
		add("workers", "must be at most %d, got %d", maxWorkers, c.Workers)
	}
	if c.Input.MaxLines > maxLines {
		add("input.max_lines", "must be at most %d, got %d", maxLines, c.Input.MaxLines)
	}
	if c.Input.MaxBytes > maxBytes {
		add("input.max_bytes", "must be at most %d bytes (1MiB), got %d", maxBytes, c.Input.MaxBytes)
	}
	if c.MaxAge > maxAge {
		add("max_age", "must be at most %s, got %s", maxAge, c.MaxAge)
	}
	if c.Provider == ProviderBedrock && c.APIKeyEnv != "" {
		add("api_key_env", "is for provider %q; bedrock uses the AWS credentials", ProviderOpenAI)
	}
	if c.Provider == ProviderBedrock && c.APIKeySecret != "" {
		add("api_key_secret", "is for provider %q; bedrock uses the AWS credentials", ProviderOpenAI)
	}
	if c.APIKeyEnv != "" && c.APIKeySecret != "" {
		add("api_key_secret", "set api_key_env or api_key_secret, not both")
	}
	if c.APIKeySecret != "" {
		if _, err := secret.ParseRef(c.APIKeySecret); err != nil {
			errs = append(errs, &configerr.Error{Key: "api_key_secret", Err: err})
		}
	}
	for i, o := range c.On {
		if !slices.Contains(outcomes, o) {
			add(fmt.Sprintf("on[%d]", i), "must be one of %v, got %q", outcomes, o)
		}
	}
	if !(c.Temperature >= 0 && c.Temperature <= 2) { // NaN fails too
		add("temperature", "must be within [0, 2], got %g", c.Temperature)
	}
	if c.MaxTokens <= 0 {
		add("max_tokens", "must be positive, got %d", c.MaxTokens)
	}
	if c.Timeout < time.Second {
		add("timeout", "must be at least 1s, got %s", c.Timeout)
	}
	if c.Workers <= 0 {
		add("workers", "must be positive, got %d", c.Workers)
	}
	if c.Input.MaxLines <= 0 {
		add("input.max_lines", "must be positive, got %d", c.Input.MaxLines)
	}
	if c.Input.MaxBytes <= 0 {
		add("input.max_bytes", "must be positive, got %d", c.Input.MaxBytes)
	}
	if c.MaxAge <= 0 {
		add("max_age", "must be positive, got %s", c.MaxAge)
	}
	if c.Guardrail.ID != "" && c.Provider != ProviderBedrock {
		add("guardrail.id", "is for provider %q only", ProviderBedrock)
	}
	if c.Guardrail.ID != "" && c.Guardrail.Version == "" {
		add("guardrail.version", "must be set with guardrail.id (a number or DRAFT)")
	}
	errs = append(errs, c.validateAnswer())
	errs = append(errs, validateRunbooks(c.Runbooks))
	if len(c.Categories) > 64 {
		add("categories", "must hold at most 64 categories, got %d", len(c.Categories))
	}
	for i, cat := range c.Categories {
		if !categoryRE.MatchString(cat) {
			add(fmt.Sprintf("categories[%d]", i), "must match %s, got %q", categoryRE, utf8cut.Head(cat, 64))
		}
	}
	if err := c.LimiterConfig(false).Validate(); err != nil {
		errs = append(errs, rekey(err, "limits"))
	}
	return errors.Join(errs...)
}

// rekey moves the limiter's keys ("rules[0].limits[1]…") under prefix.
func rekey(err error, prefix string) error {
	var out []error
	for _, e := range flatten(err) {
		var ce *configerr.Error
		if errors.As(e, &ce) {
			k := ce.Key
			const rule = "rules[0].limits"
			if len(k) >= len(rule) && k[:len(rule)] == rule {
				k = prefix + k[len(rule):]
			} else {
				k = prefix
			}
			out = append(out, &configerr.Error{Key: k, Line: ce.Line, Err: ce.Err})
			continue
		}
		out = append(out, configerr.Errorf(prefix, "%w", e))
	}
	return errors.Join(out...)
}

func flatten(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// CheckEnv reports, naming the key, an enabled openai section whose key
// variable is unset or empty; lookup is os.LookupEnv in the program.
func (c Config) CheckEnv(lookup func(string) (string, bool)) error {
	if !c.Enabled || c.Provider != ProviderOpenAI || c.APIKeyEnv == "" {
		return nil
	}
	if v, ok := lookup(c.APIKeyEnv); !ok || v == "" {
		return configerr.Errorf("api_key_env", "environment variable %s is not set", c.APIKeyEnv)
	}
	return nil
}

// RuleName is the name of the limiter rule of reports, in decisions,
// metrics and Redis keys.
const RuleName = "report"

// LimiterConfig is the limiter configuration of reports: one rule keyed
// by host+diagnostic holding Limits. With force (an operator asking for a
// report now) the rule keeps only the daily cap, under the same rule name
// so that the daily count is shared.
func (c Config) LimiterConfig(force bool) limiter.Config {
	limits := c.Limits
	if force {
		limits = nil
		for _, l := range c.Limits {
			if l.Daily != 0 {
				limits = append(limits, limiter.Limit{Daily: l.Daily})
			}
		}
	}
	// Closed: when the limiter cannot answer, no money is spent.
	cfg := limiter.Config{Timezone: "UTC", Fail: limiter.FailClosed}
	if len(limits) > 0 {
		cfg.Rules = []limiter.Rule{{Name: RuleName, Key: limiter.KeyHostDiagnostic, Limits: limits}}
	}
	return cfg
}

// JobLease is the queue lease for report jobs: a job is taken over only
// when its holder cannot still be writing it (twice the timeout plus
// extra, at least DefaultLease). extra is an investigation's wall time
// (its tool loop runs before the last turn), 0 without one.
func (c Config) JobLease(extra time.Duration) time.Duration {
	return max(DefaultLease, 2*(c.Timeout+extra))
}
