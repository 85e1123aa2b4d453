package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

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
		mine, released := sq.handleBatch(hctx, out.Messages, time.Now().Add(receiveVisibility))
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

// handleBatch sorts the messages of one receive. Other instances' notices
// are sorted at once, each on its own goroutine: a batch of ten handed over
// one after the other under a slow Redis could outlast receiveVisibility
// and be received again by other agents. Notices that may be ours are
// sorted in order, so a second action of this instance in the batch is told
// from a duplicate of the first. hidden is when the batch is visible again
// (the receive's answer plus receiveVisibility): a hand-off ends by then.
func (sq *sqsSource) handleBatch(ctx context.Context, msgs []types.Message, hidden time.Time) (mine *Trigger, released bool) {
	var wg sync.WaitGroup
	var others atomic.Bool
	for _, msg := range msgs {
		n, err := parseNotification(aws.ToString(msg.Body))
		if err == nil && n.InstanceID != sq.d.InstanceID {
			wg.Go(func() {
				if _, rel := sq.handleMessage(ctx, msg, n, nil, nil, hidden); rel {
					others.Store(true)
				}
			})
			continue
		}
		tr, rel := sq.handleMessage(ctx, msg, n, err, mine, hidden)
		if tr != nil {
			mine = tr
		}
		released = released || rel
	}
	wg.Wait()
	return mine, released || others.Load()
}

// receiveVisibility is how long the notices of one poll are hidden when SQS
// sends them. Each is sorted within milliseconds of the answer (ours hidden
// for the drain with notificationVisibility, another instance's handed over
// and deleted or shown again, a malformed one hidden for
// malformedVisibility), so it only matters for an answer nobody reads: a
// poll aborted as the watcher stops (its own notice came through the
// hand-off) or a process killed while SQS answered. With the queue's own
// visibility timeout (30 s by default) such a notice stayed hidden that long
// and its instance's drain started that much later. A notice whose sorting
// outlasts it would be received again by another agent while the first
// still sorts it, so a hand-off gives up when the hide ends (handOff).
const receiveVisibility = time.Second

// malformedVisibility hides a message that is not a lifecycle notification
// for SQS's default visibility timeout, as before receiveVisibility, so the
// queue's redrive policy moves it after its maxReceiveCount at the pace it
// was set for and the fleet does not log it every second.
const malformedVisibility = 30 * time.Second

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
		VisibilityTimeout:   int32(receiveVisibility / time.Second),
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
// says the message was made visible again at once. n and err are
// parseNotification of its body; hidden is when the message is visible
// again unless sorted before.
func (sq *sqsSource) handleMessage(ctx context.Context, msg types.Message, n notification, err error, mine *Trigger, hidden time.Time) (tr *Trigger, released bool) {
	id, receipt := aws.ToString(msg.MessageId), aws.ToString(msg.ReceiptHandle)
	log := sq.log.With("message_id", id, "source", SourceSQS)
	body := aws.ToString(msg.Body)
	switch {
	case err != nil:
		log.Warn("malformed lifecycle notification; left to the queue's redrive policy", "err", err)
		sq.setVisibility(ctx, receipt, int32(malformedVisibility/time.Second), log)
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
		switch sq.handOff(ctx, n, body, hidden, log) {
		case handedOver:
			sq.deleteMessage(ctx, receipt, log)
			return nil, false
		case handOffLapsed:
			// Visible again by now, or already received by another agent:
			// a ChangeMessageVisibility would fail on the stale receipt.
			return nil, true
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

// noticeMessages is what the Actor does to the lifecycle notification of
// an action announced on the sqs source (or handed over by another
// instance): keep it invisible while draining, delete it, forget the
// handed notices once the action is done.
type noticeMessages struct{ d Deps }

// extendNotification keeps our SQS notification invisible while draining.
func (nm *noticeMessages) extendNotification(ctx context.Context, act Action, interval time.Duration, log *slog.Logger) {
	if act.NotificationReceipt == "" || nm.d.SQS == nil {
		return
	}
	_, err := nm.d.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(act.NotificationQueueURL), ReceiptHandle: aws.String(act.NotificationReceipt),
		VisibilityTimeout: notificationVisibility(interval),
	})
	if err != nil && ctx.Err() == nil {
		log.Warn("extend lifecycle notification visibility", "err", err)
	}
}

// deleteNotification removes our SQS notification once the action is done.
func (nm *noticeMessages) deleteNotification(ctx context.Context, act Action, log *slog.Logger) {
	if act.NotificationReceipt == "" {
		return
	}
	if nm.d.SQS == nil {
		log.Warn("no SQS client to delete the lifecycle notification")
		return
	}
	bo := newBackoff(200*time.Millisecond, 5*time.Second)
	for {
		_, err := nm.d.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{
			QueueUrl: aws.String(act.NotificationQueueURL), ReceiptHandle: aws.String(act.NotificationReceipt),
		})
		if err == nil {
			return
		}
		if !isRetryable(err) || sleep(ctx, nm.d.Clock, bo.NextBackOff()) != nil {
			log.Error("delete lifecycle notification; it will reappear and be completed as no_action", "err", err)
			return
		}
	}
}

// forgetHanded drops the notices handed to this instance once its action
// is done, so a later life of the instance (back from a warm pool) does not
// find them.
func (nm *noticeMessages) forgetHanded(ctx context.Context, act Action, log *slog.Logger) {
	if nm.d.Handoff == nil || act.InstanceID != nm.d.InstanceID {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, handoffTimeout)
	defer cancel()
	if err := nm.d.Handoff.Forget(fctx, act.InstanceID); err != nil {
		log.Warn("could not drop the lifecycle notices handed to this instance; they expire with their TTL", "err", err)
	}
}
