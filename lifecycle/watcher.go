package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
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

// imdsSource is the imds source: it polls instance metadata for the
// target lifecycle state (which it hands to the Watcher's state) and the
// spot, rebalance and maintenance notices.
type imdsSource struct {
	cfg    Config
	d      Deps
	log    *slog.Logger
	m      *metrics
	states stateSink
}

// stateSink is where the imds source puts the target lifecycle state it
// reads: the Watcher.
type stateSink interface {
	returning(state string) bool
	setState(state string)
}

// sqsSource is the sqs source: it receives the Auto Scaling lifecycle
// notifications, keeps this instance's, hands the others back or over
// (handoff.go), and deletes the stale ones.
type sqsSource struct {
	cfg Config
	d   Deps
	log *slog.Logger
	m   *metrics

	// onGraceDecided, when set, is called as a cancelled notification poll's
	// grace ends, with whether its answer had begun (tests observe it).
	onGraceDecided func(answering bool)
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

// imdsAction builds the action announced by IMDS; the ASG name comes from
// the configuration or DescribeAutoScalingInstances (left empty when that
// fails: the Actor resolves it again before calling Auto Scaling).
func (im *imdsSource) imdsAction(ctx context.Context) *Action {
	act := &Action{InstanceID: im.d.InstanceID, ASGName: im.cfg.ASGName, HookName: im.cfg.HookName, Started: im.d.Clock.Now()}
	if act.ASGName == "" {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		name, err := resolveASG(rctx, im.d.AutoScaling, act.InstanceID)
		if err != nil {
			im.log.Warn("resolve auto scaling group; the actor retries", "instance_id", act.InstanceID, "err", err)
		}
		act.ASGName = name
	}
	return act
}

// getMetadata reads an IMDS path; a 404 (nothing to report yet) is "", nil.
func (im *imdsSource) getMetadata(ctx context.Context, path string) (string, error) {
	out, err := im.d.IMDS.GetMetadata(ctx, &imds.GetMetadataInput{Path: path})
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

// pollIMDS checks the IMDS paths once and returns a trigger or nil: the
// target lifecycle state always (it is recorded for State), the notices of
// drain_on only when listed (the others are not read, so they are
// ignored). A terminating state wins (its action is carried by a spot
// trigger too); then spot, scheduled events, rebalance.
func (im *imdsSource) pollIMDS(ctx context.Context) (*Trigger, error) {
	state, errState := im.getMetadata(ctx, pathTargetLifecycleState)
	var spot, rebalance, scheduled string
	var errSpot, errRebalance, errScheduled error
	if im.cfg.Drains(DrainOnSpot) {
		spot, errSpot = im.getMetadata(ctx, pathSpotInstanceAction)
	}
	if im.cfg.Drains(DrainOnScheduled) {
		scheduled, errScheduled = im.getMetadata(ctx, pathScheduledEvents)
	}
	if im.cfg.Drains(DrainOnRebalance) {
		rebalance, errRebalance = im.getMetadata(ctx, pathRebalance)
	}
	now := im.d.Clock.Now()

	var act *Action
	if errState == nil {
		im.states.setState(state)
		if isTerminating(state) || im.states.returning(state) {
			act = im.imdsAction(ctx)
		}
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
			Reason: fmt.Sprintf("target-lifecycle-state is %s (Terminating:Wait)", state)}, nil
	}
	if errScheduled == nil && scheduled != "" {
		tr, err := im.scheduledTrigger(scheduled, now)
		if tr != nil {
			return tr, nil
		}
		errScheduled = err
	}
	if errRebalance == nil && rebalance != "" {
		var rn rebalanceNotice
		if err := json.Unmarshal([]byte(rebalance), &rn); err != nil {
			errRebalance = fmt.Errorf("decode %s %q: %w", pathRebalance, rebalance, err)
		} else {
			return &Trigger{Source: sourceRebalance, At: now,
				Reason: fmt.Sprintf("rebalance recommendation at %s", rn.NoticeTime.Format(time.RFC3339))}, nil
		}
	}
	return nil, errors.Join(errState, errSpot, errScheduled, errRebalance)
}

// scheduledTrigger returns a trigger for the active draining event whose
// drain time (NotBefore − scheduled_event_lead) is earliest and has come,
// or nil. The drain's deadline is NotBefore minus SpotSafetyMargin while
// that is ahead, else the agent's drain_timeout applies.
func (im *imdsSource) scheduledTrigger(body string, now time.Time) (*Trigger, error) {
	var events []scheduledEvent
	if err := json.Unmarshal([]byte(body), &events); err != nil {
		return nil, fmt.Errorf("decode %s %q: %w", pathScheduledEvents, body, err)
	}
	var best *scheduledEvent
	var bestAt time.Time
	var errs []error
	for i, ev := range events {
		if !strings.EqualFold(ev.State, "active") || !drainingMaintenance[ev.Code] {
			continue
		}
		nb, err := parseEventTime(ev.NotBefore)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: event %s NotBefore: %w", pathScheduledEvents, ev.EventID, err))
			continue
		}
		if best == nil || nb.Before(bestAt) {
			best, bestAt = &events[i], nb
		}
	}
	if best == nil || now.Before(bestAt.Add(-im.cfg.ScheduledEventLead)) {
		return nil, errors.Join(errs...)
	}
	tr := &Trigger{Source: sourceScheduledEvent, At: now,
		Reason: fmt.Sprintf("scheduled event %s %s not before %s", best.Code, best.EventID, bestAt.UTC().Format(time.RFC3339))}
	if d := bestAt.Add(-SpotSafetyMargin); d.After(now) {
		tr.Deadline = d
	}
	return tr, nil
}

func (im *imdsSource) runIMDS(ctx context.Context, found chan<- Trigger) {
	bo := newBackoff(im.cfg.IMDSPollInterval, imdsMaxBackoff(im.cfg.IMDSPollInterval))
	for {
		tr, err := im.pollIMDS(ctx)
		if ctx.Err() != nil {
			return
		}
		if tr != nil {
			found <- *tr
			return
		}
		wait := im.cfg.IMDSPollInterval
		if err != nil {
			im.m.sourceErrors.WithLabelValues(SourceIMDS).Inc()
			wait = bo.NextBackOff()
			im.log.Warn("poll instance metadata; retrying", "source", SourceIMDS, "retry_in", wait, "err", err)
		} else {
			bo.Reset()
		}
		if sleep(ctx, im.d.Clock, wait) != nil {
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

func (sq *sqsSource) runSQS(ctx context.Context, found chan<- Trigger) {
	bo := newBackoff(time.Second, 30*time.Second)
	for ctx.Err() == nil {
		out, err := sq.receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			sq.m.sourceErrors.WithLabelValues(SourceSQS).Inc()
			wait := bo.NextBackOff()
			sq.log.Warn("receive lifecycle notifications; retrying", "source", SourceSQS, "retry_in", wait, "err", err)
			if sleep(ctx, sq.d.Clock, wait) != nil {
				return
			}
			continue
		}
		bo.Reset()
		// A batch taken in the receive grace is handled like any other:
		// others' notices are shown again at once and ours reaches Run,
		// which releases it when it comes too late. The calls run detached
		// from ctx, which may have ended.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		var mine *Trigger
		released := false
		for _, msg := range out.Messages {
			tr, rel := sq.handleMessage(hctx, msg, mine)
			if tr != nil {
				mine = tr
			}
			released = released || rel
		}
		cancel()
		if mine != nil {
			found <- *mine
			return
		}
		if released {
			if sleep(ctx, sq.d.Clock, foreignPause) != nil {
				return
			}
		}
	}
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

// receive is one long poll of queue_url. No poll starts once ctx is done;
// a poll in progress when ctx ends is aborted after NotificationReceiveGrace
// unless its answer has begun, which is then read (and returned with a nil
// error).
func (sq *sqsSource) receive(ctx context.Context) (*sqs.ReceiveMessageOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var answering atomic.Bool
	pctx = httptrace.WithClientTrace(pctx, &httptrace.ClientTrace{
		GetConn:              func(string) { answering.Store(false) }, // each SDK attempt
		GotFirstResponseByte: func() { answering.Store(true) },
	})
	var mu sync.Mutex
	var timer *time.Timer
	stopped := false
	after := func(d time.Duration, f func()) {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			timer = time.AfterFunc(d, f)
		}
	}
	stopGrace := context.AfterFunc(ctx, func() {
		after(NotificationReceiveGrace, func() {
			begun := answering.Load()
			if sq.onGraceDecided != nil {
				sq.onGraceDecided(begun)
			}
			if begun {
				after(answerReadLimit, cancel)
				return
			}
			cancel()
		})
	})
	defer func() {
		stopGrace()
		mu.Lock()
		stopped = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
	}()
	out, err := sq.d.SQS.ReceiveMessage(pctx, &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(sq.cfg.QueueURL),
		MaxNumberOfMessages: 10,
		WaitTimeSeconds:     int32(sqsWaitTime / time.Second),
	})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	return out, nil
}

// orphanLimit is when a notification's action has passed its heartbeat
// timeout without a heartbeat: hook_heartbeat_timeout when configured and
// the notice is of our terminating hook (any, when hook_name is empty), else the longest Auto Scaling allows (2 h), which no action
// outlives unheartbeated.
func (sq *sqsSource) orphanLimit(n notification) time.Time {
	hbt := maxHookHeartbeatTimeout
	ourHook := sq.cfg.HookName == "" || n.HookName == sq.cfg.HookName
	if ourHook && n.Transition == transitionTerminating && sq.cfg.HookHeartbeatTimeout > 0 {
		hbt = sq.cfg.HookHeartbeatTimeout
	}
	return n.Time.Add(hbt)
}

// orphaned reports whether the notification of another instance is one no
// agent will take: its action's heartbeat timeout has passed since it was
// sent (so unless an agent heartbeats it, it has ended) and Deps.Claimed,
// when set, says no agent claims the instance. An agent holding its notice
// keeps it hidden, so a visible one past that point only cycles through the
// fleet until the queue's retention or redrive drops it.
func (sq *sqsSource) orphaned(ctx context.Context, n notification, log *slog.Logger) bool {
	if n.Time.IsZero() || sq.d.Clock.Now().Before(sq.orphanLimit(n)) {
		return false
	}
	if sq.d.Claimed == nil {
		return true
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	claimed, err := sq.d.Claimed(cctx, n.InstanceID)
	if err != nil {
		log.Warn("could not learn whether an agent claims the lifecycle action; notification kept", "for_instance", n.InstanceID, "err", err)
		return false
	}
	return !claimed
}

// handleMessage sorts one received message: TEST_NOTIFICATION deleted,
// another instance's terminating notice handed to its agent (Deps.Handoff)
// and deleted, other instances' (or other hooks') notifications otherwise
// made visible again and never deleted, ours kept invisible and returned as
// a trigger, malformed ones left to the queue's redrive policy. released
// says the message was made visible again at once.
func (sq *sqsSource) handleMessage(ctx context.Context, msg types.Message, mine *Trigger) (tr *Trigger, released bool) {
	id, receipt := aws.ToString(msg.MessageId), aws.ToString(msg.ReceiptHandle)
	log := sq.log.With("message_id", id, "source", SourceSQS)
	body := aws.ToString(msg.Body)
	n, err := parseNotification(body)
	switch {
	case err != nil:
		log.Warn("malformed lifecycle notification; left to the queue's redrive policy", "err", err)
		return nil, false
	case n.Test:
		log.Info("consumed autoscaling:TEST_NOTIFICATION", "asg", n.ASGName)
		sq.deleteMessage(ctx, receipt, log)
		return nil, false
	case n.InstanceID == sq.d.InstanceID && n.Transition == transitionLaunching &&
		sq.cfg.LaunchHookName != "" && n.HookName == sq.cfg.LaunchHookName:
		log.Info("launching notification for this instance; deleted (the launch gate completes it by instance id)",
			"hook", n.HookName, "destination", n.Destination)
		sq.deleteMessage(ctx, receipt, log)
		return nil, false
	case n.InstanceID != sq.d.InstanceID || n.Transition != transitionTerminating ||
		(sq.cfg.HookName != "" && n.HookName != sq.cfg.HookName):
		if sq.handOff(ctx, n, body, log) {
			sq.deleteMessage(ctx, receipt, log)
			return nil, false
		}
		if n.InstanceID != sq.d.InstanceID && sq.orphaned(ctx, n, log) {
			log.Warn("lifecycle notification no agent will take: its instance is unclaimed and its action's heartbeat timeout has passed; deleted",
				"for_instance", n.InstanceID, "transition", n.Transition, "hook", n.HookName, "asg", n.ASGName,
				"age_seconds", sq.d.Clock.Now().Sub(n.Time).Seconds())
			sq.m.orphaned.WithLabelValues(transitionLabel(n.Transition)).Inc()
			sq.deleteMessage(ctx, receipt, log)
			return nil, false
		}
		log.Debug("lifecycle notification not for us; left for its owner",
			"for_instance", n.InstanceID, "transition", n.Transition, "hook", n.HookName)
		sq.setVisibility(ctx, receipt, 0, log)
		return nil, true
	case mine != nil && mine.Action.Token == n.Token:
		log.Info("duplicate delivery of our lifecycle notification; deleted")
		sq.deleteMessage(ctx, receipt, log)
		return nil, false
	case mine != nil:
		log.Warn("second lifecycle action for this instance in one batch; left for later", "hook", n.HookName)
		sq.setVisibility(ctx, receipt, 0, log)
		return nil, true
	}
	sq.setVisibility(ctx, receipt, notificationVisibility(sq.cfg.HeartbeatInterval), log)
	started := n.Time
	if started.IsZero() {
		started = sq.d.Clock.Now()
	}
	return &Trigger{
		Source: SourceSQS, At: sq.d.Clock.Now(),
		Reason: fmt.Sprintf("lifecycle notification %s for hook %s of %s", n.Transition, n.HookName, n.ASGName),
		Action: &Action{InstanceID: n.InstanceID, ASGName: n.ASGName, HookName: n.HookName, Token: n.Token,
			Started: started, NotificationQueueURL: sq.cfg.QueueURL, NotificationReceipt: receipt},
	}, false
}

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

func (sq *sqsSource) deleteMessage(ctx context.Context, receipt string, log *slog.Logger) {
	_, err := sq.d.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(sq.cfg.QueueURL), ReceiptHandle: aws.String(receipt)})
	if err != nil && ctx.Err() == nil {
		log.Warn("delete message", "err", err)
	}
}

func (sq *sqsSource) setVisibility(ctx context.Context, receipt string, seconds int32, log *slog.Logger) {
	// Detached: a message left hidden because the watcher stopped mid-batch
	// would delay another instance's drain.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, err := sq.d.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(sq.cfg.QueueURL), ReceiptHandle: aws.String(receipt), VisibilityTimeout: seconds,
	})
	if err != nil {
		log.Warn("change message visibility", "visibility_seconds", seconds, "err", err)
	}
}
