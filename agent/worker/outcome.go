package worker

import (
	"context"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// job is one received message on its way to an outcome.
type job struct {
	msg  *queue.Message
	item *drain.Item
	// ctx holds the job's process span (nil without a message, as for a
	// posted task rejected before the queue): its steps' spans start under
	// it and its log lines name its trace.
	ctx  context.Context
	span trace.Span

	mu   sync.Mutex
	task task.Task
	// shown are the task's id, host and diagnostic as its log lines and
	// audit entries show them (task.QuoteID, task.QuoteText), quoted when
	// the task is set (validate, and again where it changes) so that its
	// end need not quote them; unset, they are quoted at the end.
	shown taskNames
	// dedupe is the task's value of limiter.dedupe.key, read when the task
	// is set (validate, and again where placement renames its host) for
	// the limiter's requests. Used by the handler goroutine only.
	dedupe string
	// spec is the task's diagnostic, resolved at New; set by validate
	// (zero for a task not in the catalog). Used by the handler goroutine
	// only.
	spec spec
	// hostAsSent is the task's host as the task named it when placement
	// replaced it with its owner's canonical name; "" when not.
	hostAsSent string
	received   time.Time
	// handedAt is when the agent that handed this task here received it
	// (zero for a task received here); handoff is from then to its start
	// here, once started.
	handedAt time.Time
	handoff  time.Duration
	ran      time.Duration
	ended    bool

	// release hands the unstarted message back once, whoever asks first
	// (the drain, or the handler on a fast exit).
	release sync.Once

	// leased says the job holds its task's execution lease: false until
	// the claim, and for a task run without one (redis.state_fail open).
	// Used by the handler goroutine only.
	leased bool

	// limitReq is the limiter request of an allowed decision, by which
	// the run's slots and probe are renewed and given back (Renew, Done);
	// nil until allowed, and again once given back. Used by the handler
	// goroutine only (and the keepAlive it waits for).
	limitReq *limiter.Request
	// limitDone is what gives the run's slots back, handed from the
	// limiter's Done to the finish that follows, which sends it in the
	// record's round trip (pipeline.limiterDone, pipeline.finish).
	limitDone []state.Call
	// folded is the limiter's decision that ran in the claim's script
	// (pipeline.claim), with its reply: decide resolves it instead of asking
	// the limiter again. nil when the claim made no decision.
	folded    *limiter.Folded
	foldReply any
	// decision is the limiter's allowing decision, summarised in the
	// run's outcome. Guarded by mu.
	decision *limiter.Decision
	// approval is the person's decision on a task whose diagnostic needs
	// one (approve.go); nil otherwise. Guarded by mu.
	approval *taskview.Approval

	// freeSlots gives back the job's intake slot (freeIntake) and, once
	// it has one, its worker slot; ack calls it before waiting for the
	// delete, and the handler on its way out. Used by the handler
	// goroutine only.
	freeSlots func()
	// freeIntake gives back the slot its message took on its way in: of
	// the receive window for a received one, of the handed tasks held for
	// a handed one (pipeline.take).
	freeIntake func()
}

// taskNames are a task's id, host and diagnostic as a log line or an
// audit entry shows them; set once quoted.
type taskNames struct {
	id, host, diag string
	set            bool
}

// quoteNames quotes t's id, host and diagnostic: a rejected task's are the
// sender's, unchecked or refused, and an invalid one is quoted, escaped
// and cut (task.QuoteID), in the log line and the audit entry alike.
func quoteNames(t task.Task) taskNames {
	return taskNames{id: task.QuoteID(t.ID), host: task.QuoteText(t.Host), diag: task.QuoteText(t.Diagnostic), set: true}
}

// namesLocked are j's task names as shown (quoted now when they were not
// yet); j.mu is held.
func (j *job) namesLocked() taskNames {
	if j.shown.set {
		return j.shown
	}
	return quoteNames(j.task)
}

// context is the job's trace context, for its spans and log lines.
func (j *job) context() context.Context {
	if j.ctx == nil {
		return context.Background()
	}
	return j.ctx
}

// ranFor is how long the diagnostic ran, when it did.
func (j *job) ranFor() (time.Duration, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ran, j.ran > 0
}

// outcomeRecorder is the one place a task's outcome is written: a log
// line, a metric, an audit entry and the status counters. It also counts
// the jobs between receipt and outcome (autodiag_tasks_inflight).
type outcomeRecorder struct {
	log        *slog.Logger
	m          Metrics
	store      state.AuditLog
	clock      clock.Clock
	instanceID string
	timeout    time.Duration // of each audit write (redis.timeout)
	// redactor redacts reasons and details (error texts may quote a
	// param or an output line) before they are logged or audited.
	redactor *redact.Redactor
	// known says whether a diagnostic name is in the catalog: only catalog
	// names become label values, as a rejected task's diagnostic is
	// caller-chosen and would grow the series without bound.
	known func(name string) bool

	inflight atomic.Int64
	mu       sync.Mutex
	counts   map[string]int64
}

// received counts a job that now waits for its outcome; fromQueue is false
// for a task another agent handed here, which that agent counted as
// received already (a task is received once across the fleet).
func (r *outcomeRecorder) received(fromQueue bool) {
	if fromQueue {
		r.m.Received.Inc()
	}
	r.m.Inflight.Set(float64(r.inflight.Add(1)))
}

// handedStart observes a handed task's hand-off delay as its diagnostic
// starts here: from its receipt by the agent that handed it to now
// (autodiag_task_handoff_seconds, and the handoff_seconds of its "task
// ended" line). The two agents' clocks both count: on machines whose
// clocks disagree, by their skew.
func (r *outcomeRecorder) handedStart(j *job) {
	if j.handedAt.IsZero() {
		return
	}
	d := max(0, r.clock.Now().Sub(j.handedAt))
	j.mu.Lock()
	j.handoff = d
	j.mu.Unlock()
	if r.m.Handoff != nil {
		r.m.Handoff.Observe(d.Seconds())
	}
}

// inFlight is the number of received jobs without an outcome yet.
func (r *outcomeRecorder) inFlight() int { return int(r.inflight.Load()) }

// drop lets go of a job that does not end here (deferred, running
// elsewhere): its message comes back later and ends then.
func (r *outcomeRecorder) drop(j *job) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.ended {
		j.ended = true
		r.m.Inflight.Set(float64(r.inflight.Add(-1)))
	}
}

// ended is one outcome with what explains it.
type ended struct {
	outcome, reason, detail string
	decision                *limiter.Decision
	result                  *runner.Result
}

// end writes j's one outcome; a job ends once and later calls are ignored.
func (r *outcomeRecorder) end(j *job, e ended) {
	if entry, ok := r.close(j, e); ok {
		r.audit(entry)
	}
}

// auditEntry is the audit entry end writes for e, for a caller that
// writes it itself (with the task's final record) and then calls close.
func (r *outcomeRecorder) auditEntry(j *job, e ended) state.AuditEntry {
	e.reason, e.detail = r.redactor.RedactString(e.reason), r.redactor.RedactString(e.detail)
	j.mu.Lock()
	n := j.namesLocked()
	if e.decision == nil {
		e.decision = j.decision
	}
	ap := j.approval
	j.mu.Unlock()
	var fields map[string]string
	if e.decision != nil {
		_, fields = decisionSummary(e.decision, nil)
	}
	fields = approvalFields(ap, fields)
	return state.AuditEntry{Time: r.clock.Now(), InstanceID: r.instanceID, TaskID: n.id, Host: n.host,
		Diagnostic: n.diag, Outcome: e.outcome, Reason: e.reason, Fields: fields}
}

// close is end without the audit write: it counts and logs j's outcome
// and returns the audit entry to write; false when j had ended already.
func (r *outcomeRecorder) close(j *job, e ended) (state.AuditEntry, bool) {
	e.reason, e.detail = r.redactor.RedactString(e.reason), r.redactor.RedactString(e.detail)
	j.mu.Lock()
	if j.ended {
		j.mu.Unlock()
		return state.AuditEntry{}, false
	}
	j.ended = true
	if e.result != nil {
		j.ran = e.result.Duration
	}
	if e.decision == nil {
		e.decision = j.decision
	}
	t, handoff, n := j.task, j.handoff, j.namesLocked()
	ap := j.approval
	j.mu.Unlock()
	r.m.Inflight.Set(float64(r.inflight.Add(-1)))

	diagLabel := t.Diagnostic
	if !r.known(diagLabel) {
		diagLabel = UnknownDiagnostic
	}
	r.m.Outcomes.WithLabelValues(diagLabel, e.outcome).Inc()
	r.mu.Lock()
	r.counts[e.outcome]++
	r.mu.Unlock()

	took := r.clock.Now().Sub(j.received)
	if ran, ok := j.ranFor(); ok {
		took = ran
	}
	id, host, diag := n.id, n.host, n.diag
	attrs := []any{"task_id", id, "host", host, "diagnostic", diag, "outcome", e.outcome, "reason", e.reason,
		"duration", took.Seconds()}
	var fields map[string]string
	if e.detail != "" {
		attrs = append(attrs, "detail", e.detail)
	}
	if handoff > 0 {
		attrs = append(attrs, "handoff_seconds", handoff.Seconds())
	}
	if dec := e.decision; dec != nil {
		attrs, fields = decisionSummary(dec, attrs)
	}
	if ap != nil {
		attrs = append(attrs, "approval", ap.Decision, "approval_by", ap.By, "approval_via", ap.Via)
		fields = approvalFields(ap, fields)
	}
	if res := e.result; res != nil {
		attrs = append(attrs, "exit_code", res.ExitCode, "truncated", res.Truncated)
		if (e.outcome == outcome.Failed || e.outcome == outcome.TimedOut) && len(res.Output) > 0 {
			// Redacted by the pipeline before it got here.
			attrs = append(attrs, "output", outputExcerpt(res.Output))
		}
	}
	level := slog.LevelInfo
	if e.outcome == outcome.Failed || e.outcome == outcome.TimedOut || e.outcome == outcome.Rejected {
		level = slog.LevelWarn
	}
	traceOutcome(j.span, e.outcome, e.reason, level)
	r.log.Log(j.context(), level, "task ended", attrs...)
	return state.AuditEntry{TaskID: id, Host: host, Diagnostic: diag, Outcome: e.outcome, Reason: e.reason, Fields: fields}, true
}

// decisionSummary appends the limiter decision's summary to a task's log
// attributes and returns it as audit fields too: the rule; for a denial its
// limit, retry_after and counters; for an allowed run whether it is its
// rule's breaker probe and how many slots were held; and every shadow
// rule's verdict.
func decisionSummary(dec *limiter.Decision, attrs []any) ([]any, map[string]string) {
	fields := map[string]string{"rule": dec.Rule}
	attrs = append(attrs, "rule", dec.Rule)
	if !dec.Allowed {
		attrs = append(attrs, "limit", dec.Limit, "retry_after", dec.RetryAfter.Seconds(), "degraded", dec.Degraded,
			"daily_used", dec.Counters.DailyUsed, "window_count", dec.Counters.WindowCount)
		fields["limit"], fields["retry_after"] = dec.Limit, dec.RetryAfter.String()
	} else if dec.Degraded {
		attrs = append(attrs, "degraded", true)
		fields["degraded"] = "true"
	}
	if c := dec.Counters; c.ConcurrencyLimit > 0 {
		attrs = append(attrs, "running", c.Running, "concurrency", c.ConcurrencyLimit)
		if c.MaxPercent > 0 {
			attrs = append(attrs, "agents_in_service", c.AgentsInService, "max_percent", c.MaxPercent)
			if !dec.Allowed {
				fields["running"], fields["concurrency"] = strconv.Itoa(c.Running), strconv.Itoa(c.ConcurrencyLimit)
				fields["agents_in_service"] = strconv.Itoa(c.AgentsInService)
				fields["max_percent"] = strconv.FormatFloat(c.MaxPercent, 'g', -1, 64)
			}
		}
	}
	if dec.Probe {
		attrs = append(attrs, "probe", true)
		fields["probe"] = "true"
	}
	if s := shadowSummary(dec); s != "" {
		attrs = append(attrs, "shadow", s)
		fields["shadow"] = s
	}
	return attrs, fields
}

// approvalFields are the audit fields of a decision: who, what, when,
// why and via what.
func approvalFields(ap *taskview.Approval, fields map[string]string) map[string]string {
	if ap == nil {
		return fields
	}
	if fields == nil {
		fields = map[string]string{}
	}
	fields["approval"], fields["approval_by"], fields["approval_via"] = ap.Decision, ap.By, ap.Via
	if ap.Reason != "" {
		fields["approval_reason"] = ap.Reason
	}
	if ap.DecidedAt != nil {
		fields["approval_at"] = ap.DecidedAt.UTC().Format(time.RFC3339)
	}
	return fields
}

// shadowSummary names every shadow rule's verdict on the decision, in
// configuration order, as "rule:allowed" or "rule:<reason>" (a would-be
// denial), comma-separated; "" when no shadow rule matched.
func shadowSummary(dec *limiter.Decision) string {
	if len(dec.Shadow) == 0 {
		return ""
	}
	parts := make([]string, len(dec.Shadow))
	for i, s := range dec.Shadow {
		verdict := s.Reason
		if s.Allowed {
			verdict = limiter.ReasonAllowed
		}
		parts[i] = s.Rule + ":" + verdict
	}
	return strings.Join(parts, ",")
}

// audit appends e to the audit stream, on a context of its own so that it
// is written even mid-shutdown.
func (r *outcomeRecorder) audit(e state.AuditEntry) {
	e.InstanceID = r.instanceID
	if e.Time.IsZero() {
		e.Time = r.clock.Now()
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	if err := r.store.Audit(ctx, e); err != nil {
		if stateUnreachable(err) {
			r.m.StateDegraded.WithLabelValues("audit").Inc()
		}
		logStoreErr(r.log, err)
	}
}

// snapshot returns the outcome counts so far.
func (r *outcomeRecorder) snapshot() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.counts)
}
