package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/limiter"
)

// outputLogTail bounds the (redacted) output a "task ended" log line
// carries for a failed or timed out task: enough for the error a person
// looks for first; the whole is in the record.
const outputLogTail = 2 << 10

// newRecord is the task record a claim writes: what the task asked for,
// so that GET /v1/tasks/{id} shows it while it runs too. Param values and
// the alert's name (which routes copy from alert labels and annotations)
// are redacted: the record feeds every sink and the report's prompt; the
// run itself gets the task's own values.
func newRecord(j *job, red *redact.Redactor) state.TaskRecord {
	t := j.task
	rec := state.TaskRecord{ID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Params: redactParams(red, t.Params), Severity: t.Severity,
		ReceivedAt: j.received.UTC(), Origin: t.Origin, Parent: t.Parent, Investigation: t.Investigation, Step: t.Step}
	if t.Alert != (task.Alert{}) {
		rec.Alert = &state.Alert{Source: t.Alert.Source, Name: red.RedactString(t.Alert.Name), EventID: t.Alert.EventID}
	}
	return rec
}

// redactParams is params with every value redacted (as "key=value", so a
// rule keyed on the name sees it), a new map only when one changed.
func redactParams(red *redact.Redactor, params map[string]string) map[string]string {
	var out map[string]string
	for k, v := range params {
		r := red.RedactString(k + "=" + v)
		if r == k+"="+v {
			continue
		}
		if out == nil {
			out = maps.Clone(params)
		}
		out[k] = strings.TrimPrefix(r, k+"=")
	}
	if out == nil {
		return params
	}
	return out
}

// openRecord is the record of a task run without its lease (the store did
// not answer and redis.state_fail is open).
func (p *pipeline) openRecord(j *job) state.TaskRecord {
	rec := newRecord(j, p.redactor)
	rec.Status, rec.Owner, rec.StartedAt = state.StatusRunning, p.instanceID, p.clock.Now()
	return rec
}

// LimiterSummary is the limiter's decision on a denied task, as its
// record and notifications carry it.
type LimiterSummary struct {
	Rule       string          `json:"rule"`
	Limit      string          `json:"limit"`
	Reason     string          `json:"reason"`
	RetryAfter float64         `json:"retry_after_seconds"`
	Degraded   bool            `json:"degraded,omitempty"`
	Counters   LimiterCounters `json:"counters"`
}

// LimiterCounters are the denying rule's counters after the decision;
// limits the rule does not have are zero.
type LimiterCounters struct {
	DailyUsed        int     `json:"daily_used"`
	DailyLimit       int     `json:"daily_limit"`
	SinceLast        float64 `json:"since_last_seconds"`
	WindowCount      int     `json:"window_count"`
	WindowLimit      int     `json:"window_limit"`
	BucketLevel      float64 `json:"bucket_level"`
	BucketCapacity   float64 `json:"bucket_capacity"`
	Running          int     `json:"running"`
	ConcurrencyLimit int     `json:"concurrency_limit"`
	// AgentsInService and MaxPercent: a max_percent cap's count and share.
	AgentsInService int     `json:"agents_in_service,omitempty"`
	MaxPercent      float64 `json:"max_percent,omitempty"`
}

// limiterSummary shapes dec for the task record.
func limiterSummary(dec limiter.Decision) json.RawMessage {
	c := dec.Counters
	b, _ := json.Marshal(LimiterSummary{Rule: dec.Rule, Limit: dec.Limit, Reason: dec.Reason,
		RetryAfter: dec.RetryAfter.Seconds(), Degraded: dec.Degraded, Counters: LimiterCounters{
			DailyUsed: c.DailyUsed, DailyLimit: c.DailyLimit, SinceLast: c.SinceLast.Seconds(),
			WindowCount: c.WindowCount, WindowLimit: c.WindowLimit, BucketLevel: c.BucketLevel,
			BucketCapacity: c.BucketCapacity, Running: c.Running, ConcurrencyLimit: c.ConcurrencyLimit,
			AgentsInService: c.AgentsInService, MaxPercent: c.MaxPercent}})
	return b
}

// TaskView is a task record as GET /v1/tasks/{id} returns it; webhook
// events carry the same fields with the output cut to an excerpt.
type TaskView = notify.Task

// NewTaskView shapes a stored record for the API.
func NewTaskView(rec state.TaskRecord) TaskView {
	v := TaskView{ID: rec.ID, Host: rec.Host, Diagnostic: rec.Diagnostic, Params: rec.Params, Severity: rec.Severity,
		Status: rec.Status, Outcome: rec.Outcome, Reason: rec.Reason, Attempts: rec.Attempts, Owner: rec.Owner,
		ReceivedAt: timePtr(rec.ReceivedAt), StartedAt: timePtr(rec.StartedAt), FinishedAt: timePtr(rec.FinishedAt),
		Output: rec.Output, Truncated: rec.Truncated, OutputURL: rec.OutputURL, OutputUpload: rec.OutputUpload, Limiter: rec.Limiter, Report: rec.Report,
		Origin: rec.Origin, Parent: rec.Parent, Investigation: rec.Investigation, Step: rec.Step}
	if rec.Alert != nil {
		v.Alert = &notify.Alert{Source: rec.Alert.Source, Name: rec.Alert.Name, EventID: rec.Alert.EventID}
	}
	switch rec.Outcome {
	case OutcomeSucceeded, OutcomeFailed, OutcomeTimedOut: // the diagnostic ran
		code := rec.ExitCode
		v.ExitCode = &code
	}
	return v
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// getTask serves GET /v1/tasks/{id}: the record from the state store
// (memory or Redis), 404 when there is none.
func (a *Agent) getTask(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), max(a.cfg.Redis.Timeout, time.Second))
	defer cancel()
	rec, ok, err := a.d.Store.Task(ctx, id)
	switch {
	case err != nil:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "state store: " + err.Error(), "reason": "state_unavailable"})
	case !ok:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "task " + id + " not found", "reason": "not_found"})
	default:
		writeJSON(w, http.StatusOK, NewTaskView(rec))
	}
}

// recentTasks lists the ids of the newest task outcomes (the audit
// stream), newest first, for `autodiag status` without Redis.
func (a *Agent) recentTasks(ctx context.Context, n int) []string {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Redis.Timeout)
	defer cancel()
	entries, err := a.d.Store.RecentAudit(ctx, n)
	if err != nil {
		return nil
	}
	ids := []string{}
	seen := map[string]bool{}
	for _, e := range entries {
		if e.TaskID != "" && !seen[e.TaskID] {
			seen[e.TaskID] = true
			ids = append(ids, e.TaskID)
		}
	}
	return ids
}

// outputExcerpt is the head and tail of a (redacted) output for a log
// line.
func outputExcerpt(out []byte) string {
	if len(out) <= outputLogTail {
		return string(out)
	}
	return notify.Excerpt(string(out), outputLogTail, "")
}

// recentTaskIDs is how many recent task ids GET /v1/status lists.
const recentTaskIDs = 20

// wireResults builds what happens to a result: the redactor (its metric
// on the agent's registry) and, with sinks configured, the notification
// dispatcher over the outbox (Deps.Outbox, else in memory).
func (a *Agent) wireResults() error {
	red, err := redact.New(a.cfg.Results.Redact.Effective(), a.d.Registry)
	if err != nil {
		return fmt.Errorf("agent: results.redact: %w", err)
	}
	a.pipeline.redactor = red
	a.outcomes.redactor = red
	if err := a.wireUpload(); err != nil {
		return err
	}
	if len(a.cfg.Notify) == 0 {
		return nil
	}
	sinks, err := notify.NewSinks(a.cfg.Notify, a.d.LookupEnv, nil)
	if err != nil {
		return fmt.Errorf("agent: notify: %w", err)
	}
	ob := a.d.Outbox
	if ob == nil {
		ob = notify.NewMemoryOutbox(notify.MemoryOptions{ClaimIdle: a.cfg.NotifyClaimIdle, MaxLen: a.cfg.NotifyOutboxMax})
	}
	disp, err := notify.NewDispatcher(ob, sinks, notify.Options{InstanceID: a.d.InstanceID, MaxAge: a.cfg.NotifyMaxAge,
		StoreTimeout: a.cfg.Redis.Timeout, Clock: a.d.Clock.Now, Logger: a.log, Registerer: a.d.Registry})
	if err != nil {
		return fmt.Errorf("agent: notify: %w", err)
	}
	a.notifier = &notifier{d: disp, base: context.WithoutCancel(a.hard), timeout: a.cfg.Redis.Timeout, clock: a.d.Clock, log: a.log.With("component", "notify")}
	a.pipeline.notifier = a.notifier
	a.sup.notifier = a.notifier
	return nil
}
