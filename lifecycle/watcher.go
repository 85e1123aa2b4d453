package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/cenkalti/backoff/v5"
)

// IMDS paths polled by the imds source (relative to /latest/meta-data/).
const (
	pathTargetLifecycleState = "autoscaling/target-lifecycle-state"
	pathSpotInstanceAction   = "spot/instance-action"
	stateTerminated          = "Terminated"
)

// sqsWaitTime is the long-poll duration of the sqs source (the SQS maximum).
const sqsWaitTime = 20 * time.Second

// foreignPause spaces receives when a batch held only notifications for
// other instances (made visible again at once), so a shared queue does not
// turn into a busy loop.
const foreignPause = time.Second

// Watcher polls the configured trigger sources (imds, sqs) and reports the
// first drain trigger. The signal source is the agent's.
type Watcher struct {
	cfg Config
	d   Deps
	log *slog.Logger
	m   *metrics
}

// NewWatcher checks that the clients of the configured sources are present.
func NewWatcher(cfg Config, d Deps) (*Watcher, error) {
	d = d.withDefaults()
	var errs []error
	if cfg.Has(SourceIMDS) && d.IMDS == nil {
		errs = append(errs, errors.New("lifecycle: imds source configured without an IMDS client"))
	}
	if cfg.Has(SourceSQS) && d.SQS == nil {
		errs = append(errs, errors.New("lifecycle: sqs source configured without an SQS client"))
	}
	if (cfg.Has(SourceIMDS) || cfg.Has(SourceSQS)) && d.InstanceID == "" {
		errs = append(errs, errors.New("lifecycle: instance id required by the imds and sqs sources"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Watcher{cfg: cfg, d: d, log: d.Logger.With("component", "lifecycle"), m: newMetrics(d.Registerer)}, nil
}

// Run polls the configured sources (imds target-lifecycle-state and
// spot/instance-action every imds_poll_interval; sqs long poll on
// queue_url) until ctx is done or a trigger fires. It calls fire for the
// first trigger only, after every source has been told to stop (no
// ReceiveMessage starts after it), and returns nil. Polling errors are
// logged and retried with backoff. With no imds or sqs source it waits for
// ctx. A cancelled ctx returns nil.
func (w *Watcher) Run(ctx context.Context, fire func(Trigger)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	found := make(chan Trigger, 2)
	var wg sync.WaitGroup
	if w.cfg.Has(SourceIMDS) {
		wg.Go(func() { w.runIMDS(ctx, found) })
	}
	if w.cfg.Has(SourceSQS) {
		wg.Go(func() { w.runSQS(ctx, found) })
	}

	select {
	case <-ctx.Done():
		wg.Wait()
		close(found)
		for late := range found { // found just as the watcher stopped
			w.release(ctx, late)
		}
		return nil
	case tr := <-found:
		cancel()
		w.log.Info("lifecycle trigger", "source", tr.Source, "reason", tr.Reason,
			"instance_id", w.d.InstanceID, "deadline", tr.Deadline, "has_action", tr.Action != nil)
		fire(tr)
		wg.Wait()
		close(found)
		for late := range found {
			w.release(ctx, late)
		}
		return nil
	}
}

// release hands back the notification of a trigger that lost the race, so
// it is not hidden until its visibility timeout. ctx is the watcher's,
// already cancelled: the call runs detached from it, under its own bound.
func (w *Watcher) release(ctx context.Context, tr Trigger) {
	if tr.Action == nil || tr.Action.NotificationReceipt == "" || w.d.SQS == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := w.d.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(tr.Action.NotificationQueueURL), ReceiptHandle: aws.String(tr.Action.NotificationReceipt),
		VisibilityTimeout: 0,
	})
	if err != nil {
		w.log.Warn("release lifecycle notification", "err", err)
	}
}

// Probe checks the imds source once: when target-lifecycle-state is already
// Terminated it returns the action to complete. It returns nil, nil when
// there is none or the imds source is not configured. The agent calls it
// when SIGTERM arrives (and may call it again before completing a drain
// started by a spot notice without an action).
func (w *Watcher) Probe(ctx context.Context) (*Action, error) {
	if !w.cfg.Has(SourceIMDS) {
		return nil, nil
	}
	state, err := w.getMetadata(ctx, pathTargetLifecycleState)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: probe %s: %w", pathTargetLifecycleState, err)
	}
	if state != stateTerminated {
		return nil, nil
	}
	return w.imdsAction(ctx), nil
}

// TargetLifecycleState reads the instance's target lifecycle state from
// instance metadata ("InService", "Terminated", …; "" while IMDS has none).
// Without the imds source it answers "", nil: nothing is known.
func (w *Watcher) TargetLifecycleState(ctx context.Context) (string, error) {
	if !w.cfg.Has(SourceIMDS) {
		return "", nil
	}
	state, err := w.getMetadata(ctx, pathTargetLifecycleState)
	if err != nil {
		return "", fmt.Errorf("lifecycle: %s: %w", pathTargetLifecycleState, err)
	}
	return state, nil
}

// imdsAction builds the action announced by IMDS; the ASG name comes from
// the configuration or DescribeAutoScalingInstances (left empty when that
// fails: the Actor resolves it again before calling Auto Scaling).
func (w *Watcher) imdsAction(ctx context.Context) *Action {
	act := &Action{InstanceID: w.d.InstanceID, ASGName: w.cfg.ASGName, HookName: w.cfg.HookName, Started: w.d.Clock.Now()}
	if act.ASGName == "" {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		name, err := resolveASG(rctx, w.d.AutoScaling, act.InstanceID)
		if err != nil {
			w.log.Warn("resolve auto scaling group; the actor retries", "instance_id", act.InstanceID, "err", err)
		}
		act.ASGName = name
	}
	return act
}

// getMetadata reads an IMDS path; a 404 (nothing to report yet) is "", nil.
func (w *Watcher) getMetadata(ctx context.Context, path string) (string, error) {
	out, err := w.d.IMDS.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		var st interface{ HTTPStatusCode() int }
		if errors.As(err, &st) && st.HTTPStatusCode() == http.StatusNotFound {
			return "", nil
		}
		return "", err
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, 64<<10))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// spotAction is the body of spot/instance-action.
type spotAction struct {
	Action string    `json:"action"` // terminate | stop | hibernate
	Time   time.Time `json:"time"`
}

// pollIMDS checks both IMDS paths once and returns a trigger or nil.
func (w *Watcher) pollIMDS(ctx context.Context) (*Trigger, error) {
	state, errState := w.getMetadata(ctx, pathTargetLifecycleState)
	spot, errSpot := w.getMetadata(ctx, pathSpotInstanceAction)
	now := w.d.Clock.Now()

	var act *Action
	if errState == nil && state == stateTerminated {
		act = w.imdsAction(ctx)
	}
	if errSpot == nil && spot != "" {
		var sa spotAction
		if err := json.Unmarshal([]byte(spot), &sa); err != nil {
			errSpot = fmt.Errorf("decode %s %q: %w", pathSpotInstanceAction, spot, err)
		} else if sa.Action != "" {
			tr := &Trigger{Source: sourceSpot, At: now, Action: act,
				Reason: fmt.Sprintf("spot interruption notice: %s at %s", sa.Action, sa.Time.Format(time.RFC3339))}
			if !sa.Time.IsZero() {
				tr.Deadline = sa.Time.Add(-SpotSafetyMargin)
			}
			return tr, nil
		}
	}
	if act != nil {
		return &Trigger{Source: SourceIMDS, At: now, Action: act,
			Reason: "target-lifecycle-state is Terminated (Terminating:Wait)"}, nil
	}
	return nil, errors.Join(errState, errSpot)
}

func (w *Watcher) runIMDS(ctx context.Context, found chan<- Trigger) {
	bo := newBackoff(w.cfg.IMDSPollInterval, imdsMaxBackoff(w.cfg.IMDSPollInterval))
	for {
		tr, err := w.pollIMDS(ctx)
		if ctx.Err() != nil {
			return
		}
		if tr != nil {
			found <- *tr
			return
		}
		wait := w.cfg.IMDSPollInterval
		if err != nil {
			w.m.sourceErrors.WithLabelValues(SourceIMDS).Inc()
			wait = bo.NextBackOff()
			w.log.Warn("poll instance metadata; retrying", "source", SourceIMDS, "retry_in", wait, "err", err)
		} else {
			bo.Reset()
		}
		if sleep(ctx, w.d.Clock, wait) != nil {
			return
		}
	}
}

// imdsMaxBackoff caps the wait between failed instance-metadata polls. IMDS
// is link-local and cheap to ask, and a spot notice leaves two minutes, so a
// failing IMDS is retried at least every 15 s (22.5 s with the backoff's
// ±50 % jitter) rather than drifting to the 30 s used for remote APIs.
func imdsMaxBackoff(poll time.Duration) time.Duration { return max(15*time.Second, poll) }

// newBackoff is an exponential backoff from initial to maxInterval; only its
// NextBackOff is used (waits go through the injected Clock).
func newBackoff(initial, maxInterval time.Duration) *backoff.ExponentialBackOff {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = initial
	bo.MaxInterval = maxInterval
	bo.Reset()
	return bo
}

// notificationVisibility is how long our notification stays invisible per
// extension while draining: comfortably longer than a heartbeat interval.
func notificationVisibility(heartbeat time.Duration) int32 {
	v := max(2*heartbeat+30*time.Second, time.Minute)
	return int32(min(v, 12*time.Hour) / time.Second)
}

func (w *Watcher) runSQS(ctx context.Context, found chan<- Trigger) {
	bo := newBackoff(time.Second, 30*time.Second)
	for ctx.Err() == nil {
		out, err := w.d.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:            aws.String(w.cfg.QueueURL),
			MaxNumberOfMessages: 10,
			WaitTimeSeconds:     int32(sqsWaitTime / time.Second),
		})
		if ctx.Err() != nil {
			// A batch received as the watcher stops is left to its
			// visibility timeout: nothing here consumed it.
			return
		}
		if err != nil {
			w.m.sourceErrors.WithLabelValues(SourceSQS).Inc()
			wait := bo.NextBackOff()
			w.log.Warn("receive lifecycle notifications; retrying", "source", SourceSQS, "retry_in", wait, "err", err)
			if sleep(ctx, w.d.Clock, wait) != nil {
				return
			}
			continue
		}
		bo.Reset()
		var mine *Trigger
		for _, msg := range out.Messages {
			if tr := w.handleMessage(ctx, msg, mine); tr != nil {
				mine = tr
			}
		}
		if mine != nil {
			found <- *mine
			return
		}
		if len(out.Messages) > 0 {
			if sleep(ctx, w.d.Clock, foreignPause) != nil {
				return
			}
		}
	}
}

// handleMessage sorts one received message: TEST_NOTIFICATION deleted,
// other instances' (or other hooks') notifications made visible again and
// never deleted, ours kept invisible and returned as a trigger, malformed
// ones left to the queue's redrive policy.
func (w *Watcher) handleMessage(ctx context.Context, msg types.Message, mine *Trigger) *Trigger {
	id, receipt := aws.ToString(msg.MessageId), aws.ToString(msg.ReceiptHandle)
	log := w.log.With("message_id", id, "source", SourceSQS)
	n, err := parseNotification(aws.ToString(msg.Body))
	switch {
	case err != nil:
		log.Warn("malformed lifecycle notification; left to the queue's redrive policy", "err", err)
		return nil
	case n.Test:
		log.Info("consumed autoscaling:TEST_NOTIFICATION", "asg", n.ASGName)
		w.deleteMessage(ctx, receipt, log)
		return nil
	case n.InstanceID != w.d.InstanceID || n.Transition != transitionTerminating ||
		(w.cfg.HookName != "" && n.HookName != w.cfg.HookName):
		log.Debug("lifecycle notification not for us; left for its owner",
			"for_instance", n.InstanceID, "transition", n.Transition, "hook", n.HookName)
		w.setVisibility(ctx, receipt, 0, log)
		return nil
	case mine != nil && mine.Action.Token == n.Token:
		log.Info("duplicate delivery of our lifecycle notification; deleted")
		w.deleteMessage(ctx, receipt, log)
		return nil
	case mine != nil:
		log.Warn("second lifecycle action for this instance in one batch; left for later", "hook", n.HookName)
		w.setVisibility(ctx, receipt, 0, log)
		return nil
	}
	w.setVisibility(ctx, receipt, notificationVisibility(w.cfg.HeartbeatInterval), log)
	started := n.Time
	if started.IsZero() {
		started = w.d.Clock.Now()
	}
	return &Trigger{
		Source: SourceSQS, At: w.d.Clock.Now(),
		Reason: fmt.Sprintf("lifecycle notification %s for hook %s of %s", n.Transition, n.HookName, n.ASGName),
		Action: &Action{InstanceID: n.InstanceID, ASGName: n.ASGName, HookName: n.HookName, Token: n.Token,
			Started: started, NotificationQueueURL: w.cfg.QueueURL, NotificationReceipt: receipt},
	}
}

func (w *Watcher) deleteMessage(ctx context.Context, receipt string, log *slog.Logger) {
	_, err := w.d.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.cfg.QueueURL), ReceiptHandle: aws.String(receipt)})
	if err != nil && ctx.Err() == nil {
		log.Warn("delete message", "err", err)
	}
}

func (w *Watcher) setVisibility(ctx context.Context, receipt string, seconds int32, log *slog.Logger) {
	// Detached: a message left hidden because the watcher stopped mid-batch
	// would delay another instance's drain.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := w.d.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(w.cfg.QueueURL), ReceiptHandle: aws.String(receipt), VisibilityTimeout: seconds,
	})
	if err != nil {
		log.Warn("change message visibility", "visibility_seconds", seconds, "err", err)
	}
}
