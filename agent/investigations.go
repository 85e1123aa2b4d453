package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/autodiag/autodiag/agent/investigate"
	"github.com/autodiag/autodiag/agent/task"
)

// wireInvestigations makes parts' Writer an investigation when
// report.investigate is set: the tools are the catalog's entries marked
// investigate, each call a task submitted to the agent's own queue.
func (a *Agent) wireInvestigations(parts *ReportParts) error {
	ic := a.cfg.Report.Investigate
	if ic == nil || parts.Writer != nil {
		return nil
	}
	var tools []investigate.Tool
	for _, d := range a.cfg.Diagnostics {
		if d.Investigate {
			tools = append(tools, investigate.Tool{Name: d.Name, Description: d.Description, Params: d.Params})
		}
	}
	eff := ic.WithDefaults()
	budget := parts.Budget
	if budget == nil {
		budget = investigate.NewMemoryBudget(eff.DailyTokens, eff.DailyCostUSD, a.d.Clock.Now)
	}
	metrics := investigate.NewMetrics(a.d.Registry, parts.Provider.Name(), a.cfg.Report.Model)
	metrics.SetBudget(eff.DailyTokens, eff.DailyCostUSD)
	iv, err := investigate.New(investigate.Options{Report: a.cfg.Report, Provider: parts.Provider, Tools: tools,
		Tasks: &agentTasks{a: a, poll: investigationPoll}, Budget: budget, Redactor: a.pipeline.redactor,
		AllowHost: func(h string) bool { _, err := a.validator.ValidateHost(h); return err == nil },
		Now:       a.d.Clock.Now,
		Metrics:   metrics})
	if err != nil {
		return fmt.Errorf("agent: report.investigate: %w", err)
	}
	parts.Writer = iv
	return nil
}

// investigationPoll is how often a tool call's record is read while it
// runs.
const investigationPoll = 200 * time.Millisecond

// agentTasks submits an investigation's tool call as POST /v1/tasks does
// (the same validation first, a rejection recorded and audited) and
// waits for the record the pipeline writes: the limiter, caps, breaker,
// runner and redaction are the pipeline's.
type agentTasks struct {
	a    *Agent
	poll time.Duration
}

var _ investigate.Tasks = (*agentTasks)(nil)

func (at *agentTasks) Submit(ctx context.Context, s investigate.TaskSpec) (investigate.TaskRecord, error) {
	a := at.a
	now := a.d.Clock.Now()
	t := task.Task{ID: s.ID, Host: s.Host, Diagnostic: s.Diagnostic, Params: s.Params, Origin: s.Origin,
		Parent: s.Parent, Investigation: s.Investigation, Step: s.Step, CreatedAt: now.UTC()}
	if err := a.validator.Validate(&t, now); err != nil {
		a.outcomes.received()
		// The outcome's audit write is detached by design, as for POST
		// /v1/tasks: it lands even when the investigation has ended.
		a.outcomes.end( //nolint:contextcheck // see above
			&job{task: t, received: now}, ended{outcome: OutcomeRejected, reason: task.Reason(err), detail: err.Error()})
		return investigate.TaskRecord{ID: s.ID, Outcome: OutcomeRejected, Reason: err.Error()}, nil
	}
	body, err := json.Marshal(t)
	if err != nil {
		return investigate.TaskRecord{}, fmt.Errorf("task %s: %w", s.ID, err)
	}
	if _, err := a.d.Source.Send(ctx, body); err != nil {
		return investigate.TaskRecord{}, fmt.Errorf("task %s: queue: %w", s.ID, err)
	}
	tick := time.NewTicker(at.poll)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, max(a.cfg.Redis.Timeout, time.Second))
		rec, ok, err := a.d.Store.Task(rctx, s.ID)
		cancel()
		if err == nil && ok && rec.Outcome != "" {
			out := investigate.TaskRecord{ID: rec.ID, Outcome: rec.Outcome, Reason: rec.Reason, Output: rec.Output, Truncated: rec.Truncated}
			switch rec.Outcome {
			case OutcomeSucceeded, OutcomeFailed, OutcomeTimedOut:
				code := rec.ExitCode
				out.ExitCode = &code
			}
			if len(rec.Limiter) > 0 {
				out.Reason += " " + string(rec.Limiter)
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return investigate.TaskRecord{}, fmt.Errorf("task %s: no record before the investigation's time ran out: %w", s.ID, ctx.Err())
		case <-tick.C:
		}
	}
}
