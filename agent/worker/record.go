package worker

import (
	"encoding/json"
	"maps"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
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
	rec.HostAsSent = j.hostAsSent
	j.mu.Lock()
	rec.Approval = j.approval
	j.mu.Unlock()
	rec.TraceID, rec.SpanID = traceIDs(j)
	if !t.Alert.IsZero() {
		rec.Alert = &taskview.Alert{Source: t.Alert.Source, Name: red.RedactString(t.Alert.Name), EventID: t.Alert.EventID, Refs: t.Alert.Refs,
			Labels: redactContext(red, t.Alert.Labels), Annotations: redactContext(red, t.Alert.Annotations),
			StartsAt: t.Alert.StartsAt, Route: t.Alert.Route, Investigate: t.Alert.Investigate}
	}
	return rec
}

// redactContext is an alert's labels or annotations bounded and redacted
// (names and values): they feed the record, every sink and the prompt.
func redactContext(red *redact.Redactor, m map[string]string) map[string]string {
	m = task.BoundContext(m)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[red.RedactString(k)] = red.RedactString(v)
	}
	return out
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
func openRecord(j *job, red *redact.Redactor, owner string, now time.Time) state.TaskRecord {
	rec := newRecord(j, red)
	rec.Status, rec.Owner, rec.StartedAt = state.StatusRunning, owner, now
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

// outputExcerpt is the head and tail of a (redacted) output for a log
// line.
func outputExcerpt(out []byte) string {
	if len(out) <= outputLogTail {
		return string(out)
	}
	return notify.Excerpt(string(out), outputLogTail, "")
}
