package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/outcome"
)

// messages is the queue side of a job's end: the message is acknowledged
// or handed back.
type messages struct {
	src      queue.Source
	leases   *leases
	outcomes *outcomeRecorder
	log      *slog.Logger
}

// backReason is why a message goes back to the queue. It decides what
// else handBack does: a release ends the task as released, a deferral
// lets the job go without an outcome (the task ends when the message comes
// back), a retry only hands the message back (the job has ended or been
// let go already).
type backReason int

const (
	// backDrain: an unstarted message, by the drain's policy or deadline
	// or a fast exit; released once per job.
	backDrain backReason = iota
	// backCancelled: the running diagnostic was cancelled (drain deadline,
	// fast exit); released, the lease given back.
	backCancelled
	// backLimiterCancelled: the limiter gave no decision; released, the
	// lease given back.
	backLimiterCancelled
	// backStateUnavailable: no lease with redis.state_fail closed;
	// released, to be tried again after a backoff.
	backStateUnavailable
	// backRunningHere: a duplicate delivery of a task running here;
	// deferred.
	backRunningHere
	// backRunningElsewhere: another agent holds the lease; deferred.
	backRunningElsewhere
	// backLimited: the limiter deferred the task (back.reason is the
	// limiter's reason); deferred, the lease given back.
	backLimited
	// backRetry: a step after the task's end failed (the dead-letter
	// copy, sending an alarm's tasks); the message comes back to try again.
	backRetry
	// backTargetWait: a target task whose host no live agent owns yet
	// waits for one (queue.target_wait); deferred.
	backTargetWait
)

// String is the reason as the log line, the outcome and the audit entry
// carry it.
func (r backReason) String() string {
	switch r {
	case backDrain:
		return "drain"
	case backCancelled:
		return "cancelled"
	case backLimiterCancelled:
		return "limiter_cancelled"
	case backStateUnavailable:
		return "state_unavailable"
	case backRunningHere:
		return "running_here"
	case backRunningElsewhere:
		return "running_elsewhere"
	case backLimited:
		return "limited"
	case backTargetWait:
		return "target_wait"
	default:
		return "retry"
	}
}

// back is one hand-back: why, when the message comes back, and what
// explains it.
type back struct {
	why backReason
	// after is how long the message stays hidden (0: back at once).
	after time.Duration
	// reason replaces why in the log line and audit entry (the limiter's
	// reason for backLimited).
	reason string
	// detail is a release's outcome detail.
	detail string
	// fields are a deferral's audit fields; attrs its log attributes.
	fields map[string]string
	attrs  []any
}

// Fixed details of the releases whose cause has no error text.
const (
	detailDrain     = "handed back to the queue unstarted"
	detailCancelled = "running task cancelled by the drain deadline or a fast exit"
)

// handBack is the one way a message goes back to the queue: after b.after,
// without spending its way to the dead-letter queue (queue.Source.Defer),
// giving back the task's lease first where b.why says so, then ending,
// letting go or leaving the job as b.why says. Its log line, audit entry
// and outcome are those of the reason: "task ended" as released, "task
// deferred", or none for a retry (the caller logs why).
func (m *messages) handBack(j *job, b back) {
	if b.why == backDrain {
		j.release.Do(func() { m.sendBack(j, b) })
		return
	}
	m.sendBack(j, b)
}

// sendBack is handBack without the drain's once-per-job guard.
func (m *messages) sendBack(j *job, b back) {
	switch b.why {
	case backCancelled, backLimiterCancelled, backLimited:
		m.leases.releaseLease(j)
	}
	if err := m.queueCall(func(ctx context.Context) error { return m.src.Defer(ctx, j.msg, b.after) }); err != nil {
		m.log.WarnContext(j.context(), "handing the message back failed", "task_id", j.task.ID, "retry_after", b.after.Seconds(), "err", err)
	}
	reason := b.why.String()
	if b.reason != "" {
		reason = b.reason
	}
	switch b.why {
	case backDrain, backCancelled, backLimiterCancelled, backStateUnavailable:
		if b.why != backDrain && j.item != nil {
			// The drain counted the ones it released itself.
			j.item.HandedBack()
		}
		m.outcomes.end(j, ended{outcome: outcome.Released, reason: reason, detail: b.detail})
	case backRunningHere, backRunningElsewhere, backLimited, backTargetWait:
		t := j.task
		m.log.InfoContext(j.context(), "task deferred", append([]any{"task_id", t.ID, "reason", reason, "retry_after", b.after.Seconds()}, b.attrs...)...)
		m.outcomes.audit(state.AuditEntry{TaskID: t.ID, Host: t.Host, Diagnostic: t.Diagnostic, Outcome: "deferred", Reason: reason, Fields: b.fields})
		m.outcomes.drop(j)
	default:
		m.outcomes.drop(j)
	}
}

// ack deletes the message of a task that has ended. The task no longer
// needs its worker or its receive slot, so they are freed first: the
// delete is batched and may wait for a DeleteMessageBatch in flight, and a
// worker held through that wait idles for about as long as a no-op
// diagnostic runs. A message whose delete is pending is not hoarded work:
// should the delete fail, its redelivery ends as duplicate.
func (m *messages) ack(j *job) {
	if j.freeSlots != nil {
		j.freeSlots()
	}
	if err := m.queueCall(func(ctx context.Context) error { return m.src.Delete(ctx, j.msg) }); err != nil {
		m.log.WarnContext(j.context(), "delete failed; a redelivery will end as duplicate", "task_id", j.task.ID, "err", err)
	}
}

// queueCall runs one queue call, bounded by QueueCallTimeout.
func (m *messages) queueCall(call func(context.Context) error) error {
	return callWithin(QueueCallTimeout, call)
}
