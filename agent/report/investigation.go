package report

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/configerr"
)

// InvestigateConfig is `report.investigate:`: with it the report may run
// more diagnostics (those marked `investigate: true`) as tasks, within
// these budgets. Absent (nil), the report is the single-shot one.
type InvestigateConfig struct {
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
func (c InvestigateConfig) AnswerMode(provider string) string {
	if c.Answer != "" {
		return c.Answer
	}
	if provider == ProviderOpenAI {
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

// MaxInvestigateSteps is the largest max_steps.
const MaxInvestigateSteps = 20

// DefaultInvestigateConfig is the section's value for each key left out:
//
//	investigate:
//	  max_steps: 5
//	  calls_per_step: 3
//	  wall_time: 3m
//	  max_tokens: 60000
//	  context_bytes: 96KiB
func DefaultInvestigateConfig() InvestigateConfig {
	return InvestigateConfig{MaxSteps: 5, CallsPerStep: 3, WallTime: 3 * time.Minute, MaxTokens: 60000, ContextBytes: 96 << 10}
}

// WithDefaults fills every key left out (zero) from
// DefaultInvestigateConfig.
func (c InvestigateConfig) WithDefaults() InvestigateConfig {
	d := DefaultInvestigateConfig()
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
func (c InvestigateConfig) Validate() error {
	c = c.WithDefaults()
	var errs []error
	add := func(key, format string, a ...any) {
		errs = append(errs, configerr.Errorf(configerr.JoinKey("investigate", key), format, a...))
	}
	if c.MaxSteps < 1 || c.MaxSteps > MaxInvestigateSteps {
		add("max_steps", "must be within [1, %d], got %d", MaxInvestigateSteps, c.MaxSteps)
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

// Investigation is the record of one investigation, kept in the report
// (`report.investigation` of GET /v1/tasks/{id}) and sent with the
// `report` notification event: its steps, tool calls and what they cost.
type Investigation struct {
	ID     string `json:"id"`
	Parent string `json:"parent"` // the task whose report this is
	// EndedBy is what ended the tool loop: answer (the model answered),
	// max_steps, max_tokens, wall_time, daily_budget, error.
	EndedBy      string  `json:"ended_by"`
	Steps        []Step  `json:"steps"`
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
	// Gaps are the calls that were refused, as the report lists them.
	Gaps []Gap `json:"gaps,omitempty"`
	// Evidence are the task ids the answer cites that are tool calls of
	// this investigation or its parent.
	Evidence []string `json:"evidence,omitempty"`
	// DroppedCalls counts the calls refused and not recorded.
	DroppedCalls int `json:"dropped_calls,omitempty"`
}

// Step is one model turn and the tool calls it asked for.
type Step struct {
	N            int     `json:"n"`
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	Calls        []Call  `json:"calls,omitempty"`
	LatencyS     float64 `json:"latency_s"`
	// Attempts is how many requests the turn sent (429/5xx retried).
	Attempts int `json:"attempts,omitempty"`
	// Dropped is how many calls of the turn were refused without being
	// recorded (past the calls a step or an investigation keeps).
	Dropped int `json:"dropped,omitempty"`
}

// Call is one tool call: ran (a task with TaskID and its Outcome) or
// refused with a Result naming why.
type Call struct {
	Tool   string            `json:"tool"`
	Host   string            `json:"host,omitempty"`
	Params map[string]string `json:"params,omitempty"`
	// Result is ran, or the refusal: not_offered, host_out_of_scope,
	// bad_arguments, too_many_calls, budget_spent, or the task's own
	// end (rejected, rate_limited, duplicate, ...).
	Result  string `json:"result"`
	Reason  string `json:"reason,omitempty"`
	TaskID  string `json:"task_id,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	// RanOn is the agent that ran the call's task; nil when it did not
	// run.
	RanOn *taskview.RanOn `json:"ran_on,omitempty"`
	// ReusedAgeS is set when the call did not run: TaskID is a fresh
	// result of the same diagnostic on the same host, this many seconds
	// old (report.investigate.reuse_within).
	ReusedAgeS float64 `json:"reused_age_s,omitempty"`
}

// Gap is something the investigation could not check.
type Gap struct {
	Tool   string `json:"tool"`
	Host   string `json:"host,omitempty"`
	Result string `json:"result"`
	Reason string `json:"reason,omitempty"`
}

// Tree is the investigation as an indented tree for people (`autodiag
// show`, chat sinks): each step with its tokens, each call with its result
// and task, then the evidence cited.
func (inv *Investigation) Tree() string {
	var b strings.Builder
	fmt.Fprintf(&b, "investigation %s of task %s: ended by %s, %d steps, %d+%d tokens, %.4f USD\n",
		inv.ID, inv.Parent, inv.EndedBy, len(inv.Steps), inv.InputTokens, inv.OutputTokens, inv.CostUSD)
	for i, s := range inv.Steps {
		last := i == len(inv.Steps)-1
		branch, indent := "├─", "│  "
		if last {
			branch, indent = "└─", "   "
		}
		fmt.Fprintf(&b, "%s step %d: %d+%d tokens, %.1fs", branch, s.N, s.InputTokens, s.OutputTokens, s.LatencyS)
		if s.Attempts > 1 {
			fmt.Fprintf(&b, ", %d attempts", s.Attempts)
		}
		if s.Dropped > 0 {
			fmt.Fprintf(&b, ", %d more calls refused and not recorded", s.Dropped)
		}
		b.WriteString("\n")
		for j, c := range s.Calls {
			cb := "├─"
			if j == len(s.Calls)-1 {
				cb = "└─"
			}
			fmt.Fprintf(&b, "%s%s %s", indent, cb, c.Tool)
			if c.Host != "" {
				fmt.Fprintf(&b, " on %s", c.Host)
			}
			for _, k := range slices.Sorted(maps.Keys(c.Params)) {
				fmt.Fprintf(&b, " %s=%s", k, strconv.Quote(c.Params[k]))
			}
			fmt.Fprintf(&b, ": %s", c.Result)
			if c.TaskID != "" {
				fmt.Fprintf(&b, " → task %s", c.TaskID)
				if c.ReusedAgeS > 0 {
					fmt.Fprintf(&b, " reused, %.0fs old", c.ReusedAgeS)
				}
				if c.Outcome != "" {
					fmt.Fprintf(&b, " (%s)", c.Outcome)
				}
				if c.RanOn != nil {
					fmt.Fprintf(&b, ", ran on %s", c.RanOn)
				}
			}
			if c.Result != "ran" && c.Reason != "" {
				fmt.Fprintf(&b, " — %s", strings.Join(strings.Fields(c.Reason), " "))
			}
			b.WriteString("\n")
		}
	}
	if len(inv.Evidence) > 0 {
		fmt.Fprintf(&b, "evidence cited: %s\n", strings.Join(inv.Evidence, ", "))
	}
	return b.String()
}
