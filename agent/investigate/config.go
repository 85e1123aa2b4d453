package investigate

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/internal/configerr"
)

// Config is the `report.investigate:` section: with it the report may run
// more diagnostics (those marked `investigate: true`) as tasks, within
// these budgets. Absent (nil), the report is the single-shot one.
type Config struct {
	// MaxSteps is how many model turns may ask for tools (1..20).
	MaxSteps int `yaml:"max_steps"`
	// CallsPerStep is how many tool calls of one turn run; the rest are
	// refused too_many_calls.
	CallsPerStep int `yaml:"calls_per_step"`
	// WallTime bounds the tool loop; the last turn without tools is
	// bounded by report.timeout.
	WallTime time.Duration `yaml:"wall_time"`
	// MaxTokens bounds input+output tokens of the tool loop.
	MaxTokens int `yaml:"max_tokens"`
	// Hosts widens the scope from the alert's host to hosts matching this
	// regexp (never beyond the host allow-list); empty: the alert's host.
	Hosts string `yaml:"hosts"`
	// ContextBytes bounds the conversation sent to the model: older tool
	// results are cut to their first lines when it would pass it.
	ContextBytes runner.Size `yaml:"context_bytes"`
	// DailyTokens and DailyCostUSD are fleet-wide budgets a day (UTC),
	// counted in the limiter's Redis; 0 is no budget.
	DailyTokens  int64   `yaml:"daily_tokens"`
	DailyCostUSD float64 `yaml:"daily_cost_usd"`
	// Prices are USD per million tokens by model id.
	Prices map[string]Price `yaml:"prices"`
	// DailyTokensHard makes DailyTokens a hard cap: an estimate of each
	// model call is reserved before it is sent, and a call that would pass
	// the cap is not made.
	DailyTokensHard bool `yaml:"daily_tokens_hard"`
	// ReuseWithin lets a tool call cite a result of the same diagnostic,
	// host and params this agent got at most this long ago instead of
	// running it again; 0: never.
	ReuseWithin time.Duration `yaml:"reuse_within"`
	// Answer is how the model gives its structured answer: json_schema
	// (OpenAI's response_format) or submit_report (a tool it calls).
	// Empty: json_schema for openai, submit_report for bedrock.
	Answer string `yaml:"answer"`
}

// How a model gives its structured answer (report.investigate.answer).
const (
	AnswerJSONSchema   = "json_schema"
	AnswerSubmitReport = "submit_report"
)

// AnswerMode is the answer mode of provider: Answer, or the provider's
// default.
func (c Config) AnswerMode(provider string) string {
	if c.Answer != "" {
		return c.Answer
	}
	if provider == report.ProviderOpenAI {
		return AnswerJSONSchema
	}
	return AnswerSubmitReport
}

// Price is the cost of a model, USD per million tokens.
type Price struct {
	InputPerMTok  float64 `yaml:"input_per_mtok"`
	OutputPerMTok float64 `yaml:"output_per_mtok"`
}

// Cost is the USD cost of in and out tokens at p. Counts below zero and a
// price that is not a finite, non-negative number count as 0, so that a
// cost is always a finite, non-negative number: it is added to counters
// that cannot decrease and stored as JSON, which has no NaN.
func (p Price) Cost(in, out int) float64 {
	return (float64(max(in, 0))*usd(p.InputPerMTok) + float64(max(out, 0))*usd(p.OutputPerMTok)) / 1e6
}

// maxUSD bounds every amount of money the configuration may hold; past it
// a value is a typo, and products of it stay finite.
const maxUSD = 1e12

// validUSD reports whether f is an amount of money: finite, within
// [0, maxUSD].
func validUSD(f float64) bool { return f >= 0 && f <= maxUSD }

// usd is f when validUSD, else 0.
func usd(f float64) float64 {
	if !validUSD(f) {
		return 0
	}
	return f
}

// MaxSteps is the largest max_steps.
const MaxSteps = 20

// DefaultConfig is the section's value for each key left out:
//
//	investigate:
//	  max_steps: 5
//	  calls_per_step: 3
//	  wall_time: 3m
//	  max_tokens: 60000
//	  context_bytes: 96KiB
func DefaultConfig() Config {
	return Config{MaxSteps: 5, CallsPerStep: 3, WallTime: 3 * time.Minute, MaxTokens: 60000, ContextBytes: 96 << 10}
}

// WithDefaults fills every key left out (zero) from
// DefaultConfig.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.MaxSteps == 0 {
		c.MaxSteps = d.MaxSteps
	}
	if c.CallsPerStep == 0 {
		c.CallsPerStep = d.CallsPerStep
	}
	if c.WallTime == 0 {
		c.WallTime = d.WallTime
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = d.MaxTokens
	}
	if c.ContextBytes == 0 {
		c.ContextBytes = d.ContextBytes
	}
	return c
}

// Validate reports every problem of the section (its keys left out taking
// their defaults), each key under "investigate".
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	add := func(key, format string, a ...any) {
		errs = append(errs, configerr.Errorf(configerr.JoinKey("investigate", key), format, a...))
	}
	if c.MaxSteps < 1 || c.MaxSteps > MaxSteps {
		add("max_steps", "must be within [1, %d], got %d", MaxSteps, c.MaxSteps)
	}
	if c.CallsPerStep < 1 || c.CallsPerStep > 10 {
		add("calls_per_step", "must be within [1, 10], got %d", c.CallsPerStep)
	}
	if c.WallTime < time.Second || c.WallTime > time.Hour {
		add("wall_time", "must be within [1s, 1h], got %s", c.WallTime)
	}
	if c.MaxTokens < 1000 {
		add("max_tokens", "must be at least 1000, got %d", c.MaxTokens)
	}
	if c.ContextBytes < 4<<10 || c.ContextBytes > 1<<20 {
		add("context_bytes", "must be within [4KiB, 1MiB], got %d", c.ContextBytes)
	}
	if c.Hosts != "" {
		if _, err := regexp.Compile(c.Hosts); err != nil {
			add("hosts", "invalid regexp: %w", err)
		}
	}
	if c.DailyTokens < 0 {
		add("daily_tokens", "must not be negative, got %d", c.DailyTokens)
	}
	if !validUSD(c.DailyCostUSD) {
		add("daily_cost_usd", "must be a finite number, not negative, got %g", c.DailyCostUSD)
	}
	switch c.Answer {
	case "", AnswerJSONSchema, AnswerSubmitReport:
	default:
		add("answer", "must be %q or %q, got %q", AnswerJSONSchema, AnswerSubmitReport, c.Answer)
	}
	if c.ReuseWithin < 0 || c.ReuseWithin > time.Hour {
		add("reuse_within", "must be within [0, 1h], got %s", c.ReuseWithin)
	}
	if c.DailyTokensHard && c.DailyTokens == 0 {
		add("daily_tokens_hard", "is set but daily_tokens is 0 (no cap to hold)")
	}
	for m, p := range c.Prices {
		if !validUSD(p.InputPerMTok) {
			add(fmt.Sprintf("prices.%s.input_per_mtok", m), "must be a finite number, not negative, got %g", p.InputPerMTok)
		}
		if !validUSD(p.OutputPerMTok) {
			add(fmt.Sprintf("prices.%s.output_per_mtok", m), "must be a finite number, not negative, got %g", p.OutputPerMTok)
		}
	}
	return errors.Join(errs...)
}
