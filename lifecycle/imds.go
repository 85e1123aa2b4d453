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
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

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
