package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// handoffBlock is how long one blocking read of the notices handed to this
// instance waits. A handed notice ends the read at once, and so does the
// watcher stopping where the store can interrupt the read (the agent's
// Redis store can; otherwise Run returns up to this much later); it decides
// what an idle agent costs: one read per handoffBlock.
const handoffBlock = 30 * time.Second

// handoffTimeout bounds one Forget, and a Take beyond its block. A Give is
// bounded by its notice's hide instead (handOff).
const handoffTimeout = 5 * time.Second

// Results of a hand-off, the {result} label of
// autodiag_lifecycle_handoffs_total.
const (
	handoffHanded  = "handed"   // stored for the instance's agent; the message deleted
	handoffNoAgent = "no_agent" // no live agent has the instance: made visible again
	handoffError   = "error"    // the store failed: made visible again
)

var handoffResults = []string{handoffHanded, handoffNoAgent, handoffError}

// handoffTTL is how long a handed notice is kept: the hook's heartbeat
// timeout (the longest Auto Scaling allows when unknown), after which the
// action it announces has ended unless someone heartbeats it.
func (sq *sqsSource) handoffTTL() time.Duration {
	if sq.cfg.HookHeartbeatTimeout > 0 {
		return sq.cfg.HookHeartbeatTimeout
	}
	return maxHookHeartbeatTimeout
}

// ourHook reports whether n is a terminating notice of the hook this fleet
// drains on (any hook when hook_name is empty).
func (sq *sqsSource) ourHook(n notification) bool {
	return n.Transition == transitionTerminating && (sq.cfg.HookName == "" || n.HookName == sq.cfg.HookName)
}

// What handOff did with a notice.
type handOffResult int

const (
	notHanded     handOffResult = iota // not ours to hand, or the store said no in time: the caller handles it as before
	handedOver                         // stored for its instance's agent: delete the message
	handOffLapsed                      // the Give outlasted the notice's hide: it is visible again, leave it
)

// handOff gives another instance's terminating notice to that instance's
// agent through Deps.Handoff. It reports handedOver once the notice is
// stored, so that the message may be deleted; notHanded when there is
// nothing to hand (no hand-off configured, a notice past its heartbeat
// timeout) or the store answered no or failed while the notice was still
// hidden: the caller handles it as before, orphan or visible again.
//
// The Give ends at hidden, when the receive's hide ends. A Give that waited
// longer, on a slow Redis, let the next agent receive the notice and start
// a Give of its own every receiveVisibility: a pile of Gives on the Redis
// that was already slow, and a failed ChangeMessageVisibility for each on a
// receipt no longer valid. Bounded, one agent at a time tries; a notice
// whose Give lapses is back on the queue, where the pollers keep passing it
// round until its own agent receives it or Redis answers in time.
func (sq *sqsSource) handOff(ctx context.Context, n notification, body string, hidden time.Time, log *slog.Logger) handOffResult {
	if sq.d.Handoff == nil || n.InstanceID == sq.d.InstanceID || !sq.ourHook(n) {
		return notHanded
	}
	if !n.Time.IsZero() && !sq.d.Clock.Now().Before(sq.orphanLimit(n)) {
		return notHanded
	}
	hctx, cancel := context.WithDeadline(ctx, hidden)
	defer cancel()
	handed, err := sq.d.Handoff.Give(hctx, n.InstanceID, body, sq.handoffTTL())
	switch {
	case err != nil && !time.Now().Before(hidden):
		sq.m.handoffs.WithLabelValues(handoffError).Inc()
		log.Warn("could not hand the lifecycle notice to its instance's agent before its hide ended; it is visible again",
			"for_instance", n.InstanceID, "hidden_seconds", receiveVisibility.Seconds(), "err", err)
		return handOffLapsed
	case err != nil:
		sq.m.handoffs.WithLabelValues(handoffError).Inc()
		log.Warn("could not hand the lifecycle notice to its instance's agent; made visible again",
			"for_instance", n.InstanceID, "err", err)
	case !handed:
		sq.m.handoffs.WithLabelValues(handoffNoAgent).Inc()
		log.Debug("no live agent for the lifecycle notice's instance; made visible again", "for_instance", n.InstanceID)
	default:
		sq.m.handoffs.WithLabelValues(handoffHanded).Inc()
		log.Info("lifecycle notice handed to its instance's agent", "for_instance", n.InstanceID, "hook", n.HookName)
		return handedOver
	}
	return notHanded
}

// runHandoff reads the notices other agents handed to this instance, beside
// the sqs source's own poll, and reports the first one that is this
// instance's terminating action as a trigger. Handed notices stay stored
// until the action completes (Actor.Complete forgets them) or their TTL
// ends, so an agent restarted before it persisted its drain finds its
// notice again.
func (sq *sqsSource) runHandoff(ctx context.Context, found chan<- Trigger) {
	bo := newBackoff(time.Second, 30*time.Second)
	after := ""
	failed := 0 // reads failed in a row
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, handoffBlock+handoffTimeout)
		ns, err := sq.d.Handoff.Take(rctx, sq.d.InstanceID, after, handoffBlock)
		cancel()
		if ctx.Err() != nil {
			return // a notice read now stays stored for the next reader
		}
		if err != nil {
			sq.m.sourceErrors.WithLabelValues(sourceHandoff).Inc()
			failed++
			wait := bo.NextBackOff()
			// One failed read is not yet worth a warning: a read cut by a
			// stop of this process (a frozen VM, SIGSTOP) fails once on
			// resume and the next one works. Redis down fails again a
			// second later, and that warns.
			level := slog.LevelWarn
			if failed == 1 {
				level = slog.LevelInfo
			}
			sq.log.Log(ctx, level, "read lifecycle notices handed to this instance; retrying (the queue's own poll goes on)",
				"source", sourceHandoff, "retry_in", wait.Seconds(), "failed_reads", failed, "err", err)
			if sleep(ctx, sq.d.Clock, wait) != nil {
				return
			}
			continue
		}
		failed = 0
		bo.Reset()
		for _, hn := range ns {
			after = hn.ID
			if tr := sq.handedTrigger(hn); tr != nil {
				found <- *tr
				return
			}
		}
	}
}

// handedTrigger turns a handed notice into a trigger when it is this
// instance's terminating action, still within its heartbeat timeout.
func (sq *sqsSource) handedTrigger(hn HandedNotice) *Trigger {
	log := sq.log.With("source", sourceHandoff, "handoff_id", hn.ID)
	n, err := parseNotification(hn.Body)
	switch {
	case err != nil:
		log.Warn("malformed handed lifecycle notice; ignored", "err", err)
		return nil
	case n.InstanceID != sq.d.InstanceID || !sq.ourHook(n):
		log.Warn("handed lifecycle notice is not this instance's terminating action; ignored",
			"for_instance", n.InstanceID, "transition", n.Transition, "hook", n.HookName)
		return nil
	case !n.Time.IsZero() && !sq.d.Clock.Now().Before(sq.orphanLimit(n)):
		log.Info("handed lifecycle notice is past its heartbeat timeout; ignored",
			"age_seconds", sq.d.Clock.Now().Sub(n.Time).Seconds())
		return nil
	}
	started := n.Time
	if started.IsZero() {
		started = sq.d.Clock.Now()
	}
	return &Trigger{
		Source: SourceSQS, At: sq.d.Clock.Now(),
		Reason: fmt.Sprintf("lifecycle notification %s for hook %s of %s (handed over by another agent)", n.Transition, n.HookName, n.ASGName),
		Action: &Action{InstanceID: n.InstanceID, ASGName: n.ASGName, HookName: n.HookName, Token: n.Token, Started: started},
	}
}
