package approval

import (
	"context"
	"errors"
	"time"

	"github.com/autodiag/autodiag/agent/taskview"
)

// ErrUnknown: no task with that id is parked for approval (never parked,
// or its record lapsed).
var ErrUnknown = errors.New("approval: no task with that id awaits approval")

// ErrDecided: the task's approval was decided already; the error says
// how.
var ErrDecided = errors.New("approval: already decided")

// Parked is a task waiting for (or sent on after) a person's decision.
type Parked struct {
	TaskID     string            `json:"task_id"`
	Diagnostic string            `json:"diagnostic"`
	Host       string            `json:"host"`
	Origin     string            `json:"origin,omitempty"`
	Params     map[string]string `json:"params,omitempty"`
	// Investigation and Parent place an investigation's tool call.
	Investigation string `json:"investigation,omitempty"`
	Parent        string `json:"parent,omitempty"`
	// Body is the task's queue message body, sent again once decided.
	Body []byte `json:"body"`
	// Approval is when it was asked and its deadline; the decision, once
	// made, is kept apart (Store.Decide) and filled in by Store.Get.
	Approval taskview.Approval `json:"approval"`
}

// Store keeps parked tasks and their decisions. Every method is atomic
// on its own; the times are the agent's clock's.
type Store interface {
	// Park stores p unless a task with its id is parked already: true
	// when stored, else the one stored (with its decision, if any).
	Park(ctx context.Context, p Parked) (Parked, bool, error)
	// Get is the parked task with its decision; false when none.
	Get(ctx context.Context, id string) (Parked, bool, error)
	// Decide stores a's decision once and makes the task due at now to
	// be sent on: ErrUnknown when nothing is parked under id,
	// ErrDecided (and the stored decision) when it was decided before.
	Decide(ctx context.Context, id string, a taskview.Approval, now time.Time) (taskview.Approval, error)
	// Due takes up to n task ids due at now (a deadline passed, or
	// decided and not yet sent on) and makes them due again after lease,
	// so that of several agents sweeping one sends each.
	Due(ctx context.Context, now time.Time, lease time.Duration, n int) ([]string, error)
	// Sent takes id off the due set: its message is on the queue.
	Sent(ctx context.Context, id string) error
	// Waiting lists up to n task ids not sent on yet, earliest due first.
	Waiting(ctx context.Context, n int) ([]string, error)
	// Pending counts the tasks parked and not decided yet (at now).
	Pending(ctx context.Context, now time.Time) (int64, error)
}
