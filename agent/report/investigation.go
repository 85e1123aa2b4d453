package report

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/autodiag/autodiag/agent/taskview"
)

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
