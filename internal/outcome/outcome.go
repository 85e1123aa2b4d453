// Package outcome names the ends of a task: every task ends in exactly one
// of them (README "Outcomes"), and the worker, the runner, the limiter,
// notifications, reports and investigations all spell them from here. It
// imports nothing of autodiag.
package outcome

// The outcomes a task can end in; their strings are contract (metric
// label values, record and audit fields, notification event types).
const (
	Succeeded   = "succeeded"
	Failed      = "failed"
	TimedOut    = "timed_out"
	RateLimited = "rate_limited"
	Rejected    = "rejected"
	Duplicate   = "duplicate"
	Stale       = "stale"
	Released    = "released"
	// Denied: the diagnostic needs a person's approval (catalog
	// `approval: required`) and it was refused or not given within its
	// approval_timeout (reasons approval_denied, approval_timeout).
	Denied = "denied"
)

// All lists the outcomes in a stable order (the order of the README).
func All() []string {
	return []string{Succeeded, Failed, TimedOut, RateLimited, Rejected, Duplicate, Stale, Released, Denied}
}

// Ran reports whether a task with this outcome ran its diagnostic.
func Ran(o string) bool { return o == Succeeded || o == Failed || o == TimedOut }
