package hooks

import (
	"context"
	"fmt"
	"time"

	"github.com/autodiag/autodiag/agent/investigate"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/outcome"
)

// investigator is the report writer when report.investigate is set (nil
// when not): the tools are the catalog's entries marked investigate, each
// call a task submitted through the agent's one way in (Options.Tasks).
func (b builder) investigator(o Options, parts ReportParts) (*investigate.Investigator, error) {
	h := b.h
	ic := o.Config.Report.Investigate
	if ic == nil {
		return nil, nil
	}
	var tools []investigate.Tool
	for _, d := range o.Config.Diagnostics {
		if d.Investigate {
			tools = append(tools, investigate.Tool{Name: d.Name, Description: d.Description, Params: d.Params})
		}
	}
	eff := ic.WithDefaults()
	budget := parts.Budget
	if budget == nil {
		budget = investigate.NewMemoryBudget(eff.DailyTokens, eff.DailyCostUSD, o.Clock)
	}
	metrics := investigate.NewMetrics(o.Registry, parts.Provider.Name(), o.Config.Report.Model)
	metrics.SetBudget(eff.DailyTokens, eff.DailyCostUSD)
	iv, err := investigate.New(investigate.Options{Report: o.Config.Report.Config, Config: *ic, Provider: parts.Provider, Tools: tools,
		Tasks: &agentTasks{o: o, poll: investigationPoll}, Budget: budget, Redactor: h.redactor,
		AllowHost: func(host string) bool { _, err := o.Validator.ValidateHost(host); return err == nil },
		Clock:     o.Clock,
		Metrics:   metrics,
		Runbooks:  parts.Runbooks})
	if err != nil {
		return nil, fmt.Errorf("hooks: report.investigate: %w", err)
	}
	return iv, nil
}

// investigationPoll is how often a tool call's record is read while it
// runs.
const investigationPoll = 200 * time.Millisecond

// agentTasks submits an investigation's tool call through the one way in
// POST /v1/tasks takes (the same validation first, a rejection recorded
// and audited) and
// waits for the record the pipeline writes: the limiter, caps, breaker,
// runner and redaction are the pipeline's.
type agentTasks struct {
	o    Options
	poll time.Duration
}

var _ investigate.Tasks = (*agentTasks)(nil)

func (at *agentTasks) Submit(ctx context.Context, s investigate.TaskSpec) (investigate.TaskRecord, error) {
	o := at.o
	now := o.Clock.Now()
	t := task.Task{ID: s.ID, Host: s.Host, Diagnostic: s.Diagnostic, Params: s.Params, Origin: s.Origin,
		Parent: s.Parent, Investigation: s.Investigation, Step: s.Step, CreatedAt: now.UTC()}
	// The agent's own investigator is the one sender that may claim this
	// origin: it signs the call with the fleet's origin key.
	t.OriginToken = task.SignOrigin(o.Validator.OriginKey, &t)
	if _, err := o.Tasks.Submit(ctx, t); err != nil {
		if task.Reason(err) != "" {
			return investigate.TaskRecord{ID: s.ID, Outcome: outcome.Rejected, Reason: err.Error()}, nil
		}
		return investigate.TaskRecord{}, fmt.Errorf("task %s: %w", s.ID, err)
	}
	tick := time.NewTicker(at.poll)
	defer tick.Stop()
	claimed := false
	for {
		rctx, cancel := context.WithTimeout(ctx, max(o.Config.Redis.Timeout, time.Second))
		rec, ok, err := o.Store.Task(rctx, s.ID)
		cancel()
		claimed = claimed || err == nil && ok
		if err == nil && ok && rec.Outcome != "" {
			out := investigate.TaskRecord{ID: rec.ID, Outcome: rec.Outcome, Reason: rec.Reason, Output: rec.Output, Truncated: rec.Truncated,
				RanOn: rec.RanOn}
			switch rec.Outcome {
			case outcome.Succeeded, outcome.Failed, outcome.TimedOut:
				out.ExitCode = new(rec.Exit())
			}
			if len(rec.Limiter) > 0 {
				out.Reason += " " + string(rec.Limiter)
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			if !claimed && at.needsApproval(s.Diagnostic) {
				// Parked tasks have no record until they are decided and
				// claimed: this one still awaits a person.
				return investigate.TaskRecord{}, fmt.Errorf("task %s: %w when the investigation's time ran out", s.ID, investigate.ErrAwaitingApproval)
			}
			return investigate.TaskRecord{}, fmt.Errorf("task %s: no record before the investigation's time ran out: %w", s.ID, ctx.Err())
		case <-tick.C:
		}
	}
}

// needsApproval: the catalog entry of diag says approval: required.
func (at *agentTasks) needsApproval(diag string) bool {
	for _, d := range at.o.Config.Diagnostics {
		if d.Name == diag {
			return d.Approval == runner.ApprovalRequired
		}
	}
	return false
}
