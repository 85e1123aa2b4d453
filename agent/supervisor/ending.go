package supervisor

import "errors"

// ErrFastExit is returned by Run when the root context ended before the
// drain did (a second signal): running work was released, not finished.
var ErrFastExit = errors.New("supervisor: stopped before the drain completed")

// ErrCompletionFailed is returned by Run when the drain ended but
// CompleteLifecycleAction did not succeed within its retries: the hook
// times out with its default result unless a restarted agent, which
// resumes the persisted drain, completes it first.
var ErrCompletionFailed = errors.New("supervisor: lifecycle action not completed")

// Ending says how a drain that finished ended, so the process can tell
// its supervisor whether to start it again.
type Ending int

const (
	// EndingNone: Run has not finished a drain.
	EndingNone Ending = iota
	// EndingDone: the drain ended a lifecycle action (completed, or Auto
	// Scaling answered that none was active), or its trigger was a spot
	// interruption, a rebalance recommendation, a scheduled maintenance
	// event or SIGTERM/SIGINT: the instance or the service is going away,
	// and the agent is not to be restarted (it would find the standing
	// notice and drain again).
	EndingDone
	// EndingDrained: drained for another reason (POST /v1/drain, a
	// persisted drain resumed without an action, the instance going back to
	// its warm pool): the instance stays, and so must an agent.
	EndingDrained
)

func (e Ending) String() string {
	switch e {
	case EndingDone:
		return "done"
	case EndingDrained:
		return "drained"
	}
	return "none"
}
