package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/cenkalti/backoff/v5"
)

// IMDS paths polled by the imds source (relative to /latest/meta-data/).
const (
	pathTargetLifecycleState = "autoscaling/target-lifecycle-state"
	pathSpotInstanceAction   = "spot/instance-action"
	pathRebalance            = "events/recommendations/rebalance"
	pathScheduledEvents      = "events/maintenance/scheduled"
)

// Values of autoscaling/target-lifecycle-state that the agent acts on.
// Warm pool states all start with StateWarmedPrefix (Warmed:Stopped,
// Warmed:Running, Warmed:Hibernated, Warmed:Terminated).
const (
	StateInService        = "InService"
	StateTerminated       = "Terminated"
	StateWarmedTerminated = "Warmed:Terminated"
	StateWarmedPrefix     = "Warmed:"
)

// Trigger.Source of the drain events found by the imds source besides
// target-lifecycle-state.
const (
	sourceRebalance      = "rebalance"   // a rebalance recommendation
	sourceScheduledEvent = "maintenance" // a scheduled maintenance event
)

// scheduledEventTimeForm is the form of a scheduled event's times
// ("21 Jan 2019 09:00:43 GMT").
const scheduledEventTimeForm = "2 Jan 2006 15:04:05 MST"

// IsWarmed reports whether a target-lifecycle-state puts the instance in a
// warm pool, where it takes no work.
func IsWarmed(state string) bool { return strings.HasPrefix(state, StateWarmedPrefix) }

// isTerminating reports the states in which a terminating lifecycle action
// waits for this instance: leaving the group, or leaving its warm pool.
func isTerminating(state string) bool {
	return state == StateTerminated || state == StateWarmedTerminated
}

// drainingMaintenance are the scheduled event codes that take the instance
// away (stop, retire) or reboot it: each starts a drain when
// scheduled_event is in drain_on.
var drainingMaintenance = map[string]bool{
	"instance-stop": true, "instance-retirement": true, "system-reboot": true,
	"instance-reboot": true, "system-maintenance": true,
}

// sqsWaitTime is the long-poll duration of the sqs source (the SQS maximum).
const sqsWaitTime = 20 * time.Second

// foreignPause spaces receives when a batch made notifications of other
// instances visible again at once, so a shared queue does not turn into a
// busy loop. A batch whose notices were all handed over or deleted is
// followed by the next receive at once.
const foreignPause = time.Second

// Watcher polls the configured trigger sources (imds, sqs) and reports the
// first drain trigger. The signal source is the agent's.
type Watcher struct {
	cfg Config
	d   Deps
	log *slog.Logger
	m   *metrics

	mu      sync.Mutex
	state   string        // last target-lifecycle-state read ("" = none, 404)
	known   bool          // state has been read at least once
	warmed  bool          // a Warmed:* state has been seen
	served  bool          // InService has been seen
	changed chan struct{} // closed and replaced when state or known changes

	imds *imdsSource
	sqs  *sqsSource
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
	w := &Watcher{cfg: cfg, d: d, log: d.Logger.With("component", "lifecycle"), m: newMetrics(d.Registerer),
		changed: make(chan struct{})}
	w.imds = &imdsSource{cfg: cfg, d: d, log: w.log, m: w.m, states: w}
	w.sqs = &sqsSource{cfg: cfg, d: d, log: w.log, m: w.m}
	return w, nil
}

// State returns the last autoscaling/target-lifecycle-state read by Run or
// Probe ("" when IMDS has none: not in an Auto Scaling group), and whether
// one has been read yet. Without the imds source it is ("", true).
func (w *Watcher) State() (state string, known bool) {
	if !w.cfg.Has(SourceIMDS) {
		return "", true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state, w.known
}

// Warmed reports whether the instance is in a warm pool now (its target
// lifecycle state is Warmed:*): the agent takes no work and says "warmed".
func (w *Watcher) Warmed() bool {
	s, _ := w.State()
	return IsWarmed(s)
}

// StateChanged returns a channel closed at the next change of State.
func (w *Watcher) StateChanged() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// WaitInService blocks until a target-lifecycle-state has been read and it
// is not Warmed:* (InService, or none outside an Auto Scaling group), then
// reports whether a Warmed:* state was seen before: an instance leaving a
// warm pool goes through the launch hook again, with the Auto Scaling group
// as destination. Run must be running for the state to move (it polls every
// imds_poll_interval); without the imds source WaitInService returns at
// once. It returns ctx.Err() when ctx ends first.
func (w *Watcher) WaitInService(ctx context.Context) (wasWarmed bool, err error) {
	if !w.cfg.Has(SourceIMDS) {
		return false, nil
	}
	for {
		w.mu.Lock()
		state, known, warmed, changed := w.state, w.known, w.warmed, w.changed
		w.mu.Unlock()
		if known && !IsWarmed(state) {
			return warmed, nil
		}
		select {
		case <-ctx.Done():
			return warmed, ctx.Err()
		case <-changed:
		}
	}
}

// returning reports whether state sends an instance that has been in
// service back to its warm pool (a scale-in with instance reuse): its
// terminating hooks run, so it drains like a terminated one.
func (w *Watcher) returning(state string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return IsWarmed(state) && w.served
}

// setState records a target-lifecycle-state answer and wakes the waiters
// when it changed.
func (w *Watcher) setState(state string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.known && w.state == state {
		return
	}
	if w.known {
		w.log.Info("target lifecycle state changed", "instance_id", w.d.InstanceID, "from", w.state, "to", state)
	}
	w.state, w.known = state, true
	w.warmed = w.warmed || IsWarmed(state)
	w.served = w.served || state == StateInService
	close(w.changed)
	w.changed = make(chan struct{})
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

	found := make(chan Trigger, 3)
	var wg sync.WaitGroup
	if w.cfg.Has(SourceIMDS) {
		wg.Go(func() { w.imds.runIMDS(ctx, found) })
	}
	if w.cfg.Has(SourceSQS) {
		wg.Go(func() { w.sqs.runSQS(ctx, found) })
		if w.d.Handoff != nil {
			wg.Go(func() { w.sqs.runHandoff(ctx, found) })
		}
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
	state, err := w.imds.getMetadata(ctx, pathTargetLifecycleState)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: probe %s: %w", pathTargetLifecycleState, err)
	}
	w.setState(state)
	if !isTerminating(state) && !w.returning(state) {
		return nil, nil
	}
	return w.imds.imdsAction(ctx), nil
}

// TargetLifecycleState reads the instance's target lifecycle state from
// instance metadata ("InService", "Terminated", …; "" while IMDS has none).
// Without the imds source it answers "", nil: nothing is known.
func (w *Watcher) TargetLifecycleState(ctx context.Context) (string, error) {
	if !w.cfg.Has(SourceIMDS) {
		return "", nil
	}
	state, err := w.imds.getMetadata(ctx, pathTargetLifecycleState)
	if err != nil {
		return "", fmt.Errorf("lifecycle: %s: %w", pathTargetLifecycleState, err)
	}
	return state, nil
}

// spotAction is the body of spot/instance-action.
type spotAction struct {
	Action string    `json:"action"` // terminate | stop | hibernate
	Time   time.Time `json:"time"`
}

// rebalanceNotice is the body of events/recommendations/rebalance.
type rebalanceNotice struct {
	NoticeTime time.Time `json:"noticeTime"`
}

// scheduledEvent is one entry of events/maintenance/scheduled. Its times are
// in the form "21 Jan 2019 09:00:43 GMT".
type scheduledEvent struct {
	Code      string `json:"Code"`
	State     string `json:"State"` // active | completed | canceled
	EventID   string `json:"EventId"`
	NotBefore string `json:"NotBefore"`
}

// parseEventTime reads a scheduled event's time (RFC 3339 accepted too).
func parseEventTime(s string) (time.Time, error) {
	if t, err := time.Parse(scheduledEventTimeForm, s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339, s)
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

// NotificationReceiveGrace is how long a notification poll in progress may
// still begin to answer after Run's ctx ends; an answer begun by then gets
// up to answerReadLimit more to be read. SQS hides the messages of an
// answer the moment it sends it, and the SDK drops an answer whose context
// is cancelled while it is read: without the grace, notices on the wire as
// the watcher stops would stay hidden for the queue's visibility timeout.
const NotificationReceiveGrace = 20 * time.Millisecond

// answerReadLimit bounds the reading of an answer that had begun when the
// grace ended.
const answerReadLimit = time.Second

// transitionLabel is the {transition} label of a lifecycle transition.
func transitionLabel(t string) string {
	switch t {
	case transitionLaunching:
		return "launching"
	case transitionTerminating:
		return "terminating"
	}
	return "other"
}
