package worker

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// claimer is the claim → decide step: the task's execution lease, then
// the limiter's decision; a task that must not run now ends or goes back
// here.
type claimer struct {
	store      state.LeaseStore
	limiter    Decider
	redactor   *redact.Redactor
	outcomes   *outcomeRecorder
	clock      clock.Clock
	log        *slog.Logger
	calls      *storeCalls
	leases     *leases
	msgs       *messages
	fin        *finisher
	instanceID string
	lease      time.Duration // queue.visibility_timeout
	dedupeKey  string        // limiter.dedupe.key
	stateFail  string        // redis.state_fail
}

// claim takes the task's execution lease; false when the job ended or was
// put back instead. When the store cannot answer within redis.timeout,
// redis.state_fail decides: open runs the task without a lease (j.leased
// false), closed hands the message back with backoff.
func (cl *claimer) claim(j *job) (state.TaskRecord, bool) {
	t := j.task
	var c state.Claim
	fold := cl.foldable(j)
	err := cl.calls.storeCall(func(ctx context.Context) (err error) {
		if fold != nil {
			// The limiter's decision runs in the claim's script, right
			// after the lease is taken: one round trip for both.
			var reply any
			var folded bool
			c, reply, folded, err = cl.store.ClaimThen(ctx, newRecord(j, cl.redactor), cl.instanceID, cl.lease,
				state.Then{Source: fold.Source, Keys: fold.Keys, Args: fold.Args})
			if folded {
				// No reply: the decision failed in the script; decide
				// asks the limiter on its own, which handles the error.
				if err == nil && c.Result == state.Claimed && reply != nil {
					j.folded, j.foldReply = fold, reply
				}
				return err
			}
		}
		c, err = cl.store.Claim(ctx, newRecord(j, cl.redactor), cl.instanceID, cl.lease)
		return err
	})
	if err != nil {
		cl.calls.degraded("claim")
		if cl.stateFail == config.StateFailClosed {
			// Without the lease exactly-once cannot be guaranteed: hand
			// the message back for a later attempt.
			delay := retryDelay(j.msg.ReceiveCount)
			cl.log.WarnContext(j.context(), "state store unavailable; task handed back", "task_id", t.ID, "state_fail", cl.stateFail,
				"retry_after", delay.Seconds(), "err", err)
			cl.msgs.handBack(j, back{why: backStateUnavailable, after: delay, detail: err.Error()})
			return state.TaskRecord{}, false
		}
		cl.log.WarnContext(j.context(), "state store unavailable; running the task without its lease", "task_id", t.ID, "state_fail", cl.stateFail,
			"detail", "the message's visibility is the only guard against a second run", "err", err)
		return cl.openRecord(j), true
	}
	switch c.Result {
	case state.AlreadyDone:
		cl.outcomes.end(j, ended{outcome: outcome.Duplicate, reason: "already_done", detail: "ended earlier as " + c.Record.Outcome})
		cl.msgs.ack(j)
		return state.TaskRecord{}, false
	case state.HeldElsewhere:
		cl.msgs.handBack(j, back{why: backRunningElsewhere, after: c.LeaseRemaining + lookAgainMargin,
			attrs: []any{"detail", "running on another agent", "owner", c.Record.Owner}})
		return state.TaskRecord{}, false
	}
	j.leased = true
	return c.Record, true
}

// decide asks the limiter; false when the task must not run now (the job
// ended, or was deferred).
func (cl *claimer) decide(j *job, rec state.TaskRecord) bool {
	t := j.task
	req := cl.request(j)
	var dec limiter.Decision
	_, lspan := tracing.Start(j.ctx, "limiter", trace.SpanKindInternal)
	err := callWithin(decideTimeout, func(ctx context.Context) (err error) {
		if f := j.folded; f != nil {
			// Decided already, in the claim's round trip.
			reply := j.foldReply
			j.folded, j.foldReply = nil, nil
			dec, err = f.Resolve(ctx, reply)
			return err
		}
		dec, err = cl.limiter.Allow(ctx, req)
		return err
	})
	traceDecision(lspan, dec, err)
	lspan.End()
	switch {
	case err != nil:
		cl.msgs.handBack(j, back{why: backLimiterCancelled, detail: err.Error()})
		return false
	case dec.Duplicate:
		rec.Outcome, rec.Reason = outcome.Duplicate, dec.Reason
		cl.fin.finish(j, rec, ended{outcome: outcome.Duplicate, reason: dec.Reason, detail: "same alert event within the dedupe ttl", decision: &dec})
		cl.msgs.ack(j)
		return false
	case dec.Allowed:
		j.limitReq = &req
		j.mu.Lock()
		j.decision = &dec
		j.mu.Unlock()
		return true
	case dec.OnExceed == limiter.OnExceedDefer:
		// A concurrency denial defers by default: its retry_after is when
		// the earliest holder's lease ends, by which time the slot is free
		// (see concurrencyDelay for when the message comes back).
		delay := min(max(dec.RetryAfter, time.Second), maxDefer)
		if dec.Reason == limiter.ReasonConcurrency {
			delay = concurrencyDelay(delay, j.spec.run.Timeout)
		}
		fields := map[string]string{"rule": dec.Rule, "limit": dec.Limit, "retry_after": delay.String()}
		if s := shadowSummary(&dec); s != "" {
			fields["shadow"] = s
		}
		cl.msgs.handBack(j, back{why: backLimited, after: delay, reason: dec.Reason, fields: fields,
			attrs: []any{"detail", "limited by rule " + dec.Rule, "host", t.Host, "rule", dec.Rule, "limit", dec.Limit}})
		return false
	default:
		rec.Outcome, rec.Reason, rec.Limiter = outcome.RateLimited, dec.Reason, limiterSummary(dec)
		cl.fin.finish(j, rec, ended{outcome: outcome.RateLimited, reason: dec.Reason, detail: "denied by rule " + dec.Rule, decision: &dec})
		cl.msgs.ack(j)
		return false
	}
}

// stillOurs checks, right before the diagnostic starts, that the run is
// not starting long after its claim and its decision: an agent stopped
// between them and the start (SIGSTOP, a paused VM, a long stall) may have
// lost the lease to another agent that runs the task, and the limiter
// counted the run at its decision, so limits that hold for decision times
// (a minimum interval, a window) would not hold for this start. A start
// one renewal period (a third of the lease) or more after the claim is not
// made: the run's slots go back, its lease is given back and the message
// is deferred at once, to be claimed and decided again. A recent claim is
// not checked, so the common path costs nothing.
func (cl *claimer) stillOurs(j *job, claimed time.Time) bool {
	late := cl.clock.Now().Sub(claimed)
	if late < cl.lease/3 {
		return true
	}
	cl.limiterDone(j, outcome.Released)
	cl.msgs.handBack(j, back{why: backLimited, reason: reasonStaleDecision,
		attrs: []any{"detail", "the run would start long after its claim and decision (the agent was stopped or stalled); claimed and decided again",
			"late", late.Seconds()}})
	return false
}

// reasonStaleDecision is the deferral of a run that would have started a
// renewal period or more after its claim and decision (stillOurs).
const reasonStaleDecision = "stale_decision"

// limiterDone tells the limiter that the allowed run of j ended, once:
// it gives back the run's slots and probe and counts a failed or timed_out
// run for the failure breakers. A cancelled run ends as released. The call
// is bounded by redis.timeout on a context of its own (it runs on a fast
// exit too); a failure is logged, as what it could not give back lapses
// with the lease.
func (cl *claimer) limiterDone(j *job, end string) {
	req := j.limitReq
	if req == nil {
		return
	}
	j.limitReq = nil
	if end == runner.Cancelled {
		end = outcome.Released
	}
	if end != outcome.Released && (cl.fin == nil || cl.fin.uploadMax == 0) {
		// A run's outcome: record's finish follows at once (no upload in
		// between to hold the slots through), and the calls ride in its
		// round trip.
		if calls, ok := cl.doneCalls(j, *req, end); ok {
			j.limitDone = calls
			return
		}
	}
	if err := cl.calls.storeCall(func(ctx context.Context) error { return cl.limiter.Done(ctx, *req, end) }); err != nil {
		cl.log.WarnContext(j.context(), "giving back the limiter's slots failed; they lapse with the lease", "task_id", req.TaskID,
			"outcome", end, "lease", cl.lease.Seconds(), "err", err)
	}
}

// doneCalls is limiterDone as calls for the finish to send in its round
// trip (one fewer round trip per task on Redis); ok is false when the
// limiter cannot make them (no Redis backend). A call the store cannot
// send falls back to Done; a failed one is logged, and what it could not
// give back lapses with the lease.
func (cl *claimer) doneCalls(j *job, req limiter.Request, end string) ([]state.Call, bool) {
	if cl.limiter == nil {
		return nil, false
	}
	sc, ok := cl.limiter.DoneCalls(req, end)
	if !ok {
		return nil, false
	}
	failed := func(err error) {
		cl.log.WarnContext(j.context(), "giving back the limiter's slots failed; they lapse with the lease", "task_id", req.TaskID,
			"outcome", end, "lease", cl.lease.Seconds(), "err", err)
	}
	calls := make([]state.Call, len(sc))
	for i, c := range sc {
		calls[i] = state.Call{Script: c.Script, Source: c.Source, Keys: c.Keys, Args: c.Args,
			Fallback: func(ctx context.Context) {
				// Done makes every call itself: the first Fallback does.
				if i == 0 {
					if err := cl.limiter.Done(ctx, req, end); err != nil {
						failed(err)
					}
				}
			},
			Done: func(err error) {
				if err != nil {
					failed(err)
				}
			}}
	}
	return calls, true
}

// request is the limiter request of j's task. A slot or probe the
// decision takes is held under the task's lease, so that it lapses with
// the lease if this agent dies.
func (cl *claimer) request(j *job) limiter.Request {
	t := j.task
	req := limiter.Request{Host: t.Host, Diagnostic: t.Diagnostic, Severity: t.Severity, Origin: t.Origin, TaskID: t.ID, Lease: cl.lease}
	if cl.dedupeKey != "" {
		req.DedupeKey, _ = t.Field(cl.dedupeKey)
	}
	return req
}

// foldable is the prepared decision when it can ride in the claim's
// script (the limiter on Redis); nil when not, and the claim and Allow
// are two calls. The store's ClaimThen says whether it could fold it.
func (cl *claimer) foldable(j *job) *limiter.Folded {
	// No limiter (a worker that only claims): nothing to fold.
	if cl.limiter == nil {
		return nil
	}
	f, ok := cl.limiter.Fold(cl.request(j))
	if !ok {
		return nil
	}
	return f
}
