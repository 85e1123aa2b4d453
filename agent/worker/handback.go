package worker

import (
	"time"
)

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
