package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/clock"
)

// autoScalingAPI is the part of *autoscaling.Client this package uses.
type autoScalingAPI interface {
	RecordLifecycleActionHeartbeat(ctx context.Context, params *autoscaling.RecordLifecycleActionHeartbeatInput, optFns ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error)
	CompleteLifecycleAction(ctx context.Context, params *autoscaling.CompleteLifecycleActionInput, optFns ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error)
	DescribeAutoScalingInstances(ctx context.Context, params *autoscaling.DescribeAutoScalingInstancesInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error)
}

// imdsAPI is the part of *imds.Client this package uses; the client handles
// IMDSv2 session tokens.
type imdsAPI interface {
	GetMetadata(ctx context.Context, params *imds.GetMetadataInput, optFns ...func(*imds.Options)) (*imds.GetMetadataOutput, error)
}

// sqsAPI is the part of *sqs.Client the sqs source and the notification
// clean-up use.
type sqsAPI interface {
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, params *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, params *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

var (
	_ autoScalingAPI = (*autoscaling.Client)(nil)
	_ imdsAPI        = (*imds.Client)(nil)
	_ sqsAPI         = (*sqs.Client)(nil)
)

// Deps are the collaborators of Watcher and Actor. Clients are nil when
// the corresponding source is not configured.
type Deps struct {
	AutoScaling autoScalingAPI // may be nil in signal-only mode
	IMDS        imdsAPI        // nil unless the imds source is configured
	SQS         sqsAPI         // nil unless the sqs source is configured
	InstanceID  string         // this instance, resolved by the agent
	Clock       clock.Waiter   // nil = wall clock
	Logger      *slog.Logger   // nil = discard
	// Registerer receives the lifecycle metrics; nil = not registered.
	Registerer prometheus.Registerer
	// Claimed reports whether an agent of the fleet has claimed the
	// lifecycle action of instanceID (it drains and will complete it). The
	// sqs source asks it before deleting a notification of another instance
	// whose action's heartbeat timeout has passed; an error or true keeps
	// the notification. nil = no agent claims any: the heartbeat timeout
	// alone decides.
	Claimed func(ctx context.Context, instanceID string) (bool, error)
	// Handoff, when set, carries terminating notices of other instances
	// from the sqs source to their agents (see Handoff); nil = every such
	// notice is made visible again for its owner to receive.
	Handoff Handoff
}

// Handoff passes lifecycle notices between the agents that share one
// notification queue, so a notice reaches its instance's agent in one
// receive instead of cycling through the fleet. The agent implements it
// on its state store (Redis).
type Handoff interface {
	// Give hands notice (the SQS message body) to the agent of
	// instanceID, kept for ttl. handed is false, with a nil error, when no
	// live agent has that instance: the notice is not stored.
	Give(ctx context.Context, instanceID, notice string, ttl time.Duration) (handed bool, err error)
	// Take returns the notices handed to instanceID after the one whose
	// id is after ("" = from the first), oldest first, waiting up to block
	// for one to arrive. It returns promptly when ctx is cancelled
	// (otherwise Watcher.Run returns only when block ends).
	Take(ctx context.Context, instanceID, after string, block time.Duration) ([]HandedNotice, error)
	// Forget drops the notices handed to instanceID: its action is done.
	Forget(ctx context.Context, instanceID string) error
}

// HandedNotice is one notice Handoff.Take returns.
type HandedNotice struct {
	ID   string // position in the instance's notices, for Take's after
	Body string // the SQS message body as received
}

func (d Deps) withDefaults() Deps {
	if d.Clock == nil {
		d.Clock = clock.Wall{}
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return d
}

// Action identifies one lifecycle action to heartbeat and complete. It is
// JSON-serialisable: the agent persists it to resume a drain after a restart.
type Action struct {
	InstanceID string
	ASGName    string
	HookName   string
	// Token is the LifecycleActionToken; empty when the action is known only
	// from IMDS (then it is completed by InstanceId).
	Token string `json:",omitempty"`
	// Started is when the action began (notification time, or when IMDS first
	// said Terminated); zero = unknown. Heartbeat stops at Started + the
	// global timeout.
	Started time.Time `json:",omitzero"`
	// NotificationQueueURL and NotificationReceipt identify the SQS
	// notification that announced the action (sqs source): it is kept
	// invisible while draining and deleted after completion.
	NotificationQueueURL string `json:",omitempty"`
	NotificationReceipt  string `json:",omitempty"`
}

// key identifies the action for the exactly-once bookkeeping.
func (a Action) key() string {
	return a.InstanceID + "|" + a.ASGName + "|" + a.HookName + "|" + a.Token
}

// Trigger tells the agent to drain.
type Trigger struct {
	Source string // "imds" | "spot" | "sqs"
	Reason string // human-readable
	At     time.Time
	// Deadline is zero when the agent's drain_timeout applies; for spot it is
	// the interruption time minus SpotSafetyMargin.
	Deadline time.Time
	// Action is nil when there is no lifecycle action to complete (spot
	// without an ASG hook in progress).
	Action *Action
}

// TriggerSpot is Trigger.Source of a spot interruption notice: the
// instance is going away whether or not a lifecycle action exists.
const TriggerSpot = sourceSpot

// TriggerRebalance and TriggerMaintenance are Trigger.Source of a rebalance
// recommendation and of a scheduled maintenance event (drain_on): the
// instance is going away, and no lifecycle action comes with them.
const (
	TriggerRebalance   = sourceRebalance
	TriggerMaintenance = sourceScheduledEvent
)

// SpotSafetyMargin is taken off a spot interruption time to give the drain
// a hard deadline that ends before the instance is reclaimed.
const SpotSafetyMargin = 15 * time.Second

// ErrNoActiveAction matches the ValidationError "No active Lifecycle Action
// found": the action already ended (completed, timed out, or never existed).
var ErrNoActiveAction = errors.New("lifecycle: no active lifecycle action")

// isNoActiveAction reports whether err is Auto Scaling's answer for an
// action that is not (or no longer) active.
func isNoActiveAction(err error) bool {
	if errors.Is(err, ErrNoActiveAction) {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationError" &&
		strings.Contains(strings.ToLower(ae.ErrorMessage()), "no active lifecycle action")
}

// isThrottle reports a throttling error by the SDK retryer's own codes.
func isThrottle(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		if _, ok := retry.DefaultThrottleErrorCodes[ae.ErrorCode()]; ok {
			return true
		}
	}
	return false
}

// isRetryable reports errors worth retrying: throttling, 5xx, the SDK's
// retry quota running out, and transport failures without an HTTP answer.
func isRetryable(err error) bool {
	if err == nil || isThrottle(err) {
		return err != nil
	}
	var st interface{ HTTPStatusCode() int }
	if errors.As(err, &st) {
		return st.HTTPStatusCode() >= 500 || st.HTTPStatusCode() == 429
	}
	var qe ratelimit.QuotaExceededError
	if errors.As(err, &qe) {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorFault() == smithy.FaultServer || ae.ErrorCode() == "InternalFailure" || ae.ErrorCode() == "ServiceUnavailable"
	}
	// An SDK call without any API answer: a transport failure, unless our
	// own context ended. Errors from elsewhere are not retried.
	var oe *smithy.OperationError
	return errors.As(err, &oe) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// metricResult is the {result} label of an API attempt.
func metricResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case isNoActiveAction(err):
		return "no_action"
	case isThrottle(err):
		return "throttled"
	default:
		return "error"
	}
}

// sleep waits d on clk, or returns ctx.Err().
func sleep(ctx context.Context, clk clock.Waiter, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-clk.After(d):
		return nil
	}
}
