package worker

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/internal/detached"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/tracing"
)

// AlertRouting is the alert stage on the task queue: CloudWatch alarms
// that reach the queue through SNS or EventBridge become the tasks their
// route makes, sent back onto the queue.
type AlertRouting struct {
	Router  *alert.Router
	Sender  alert.Sender
	Metrics *alert.Metrics
	// Alarms is told of each alarm that went into ALARM and of each that
	// went back to OK (resolution.Recorder); nil = nobody.
	Alarms AlarmWatcher
}

// AlarmWatcher follows CloudWatch alarms: which firing an alarm is in,
// so that its OK resolves that firing's tasks. Both are bounded: they
// run in the routing of one message.
type AlarmWatcher interface {
	AlarmFiring(ctx context.Context, source, eventID string)
	AlarmCleared(ctx context.Context, source, alarm string)
}

// routeAlert handles a received message that is an alarm rather than a
// task, and reports whether it did; it is asked only about a body that
// does not decode as a task. The alarm has no task outcome of its
// own: it is counted in autodiag_alerts_total and logged ("alerts
// routed", with message_id), its tasks are sent onto the queue and end
// there, and the message is deleted. An alarm body that cannot be read is
// rejected like an invalid task (dead-lettered with the reason). When the
// tasks cannot be sent the message comes back after a backoff; the
// limiter's dedupe on alert.event_id absorbs a repeat.
func (p *pipeline) routeAlert(j *job) bool {
	if p.alerts == nil {
		return false
	}
	pl, ok, err := alert.Recognize(j.msg.Body)
	if !ok {
		return false
	}
	// Routing is work of its own, short and not cancellable: started, the
	// drain waits for it rather than handing the message back under it.
	if !j.item.Start(nil) {
		return true // the drain released it first
	}
	log := redact.Logger(p.log, p.redactor).With("message_id", j.msg.ID)
	ctx := context.Background()
	if err != nil {
		ans := alert.Answer{Rejected: []alert.Outcome{{Index: 0, Reason: alert.Reason(err), Detail: err.Error()}}}
		p.alerts.Metrics.Record(ctx, log, alert.SourceCloudWatch, pl, ans)
		j.mu.Lock()
		j.task.ID = j.msg.ID
		j.shown = taskNames{}
		j.mu.Unlock()
		p.reject(j, err)
		return true
	}
	rctx, span := tracing.Start(j.context(), "route", trace.SpanKindInternal, tracing.KeyAlertSource.String(alert.SourceCloudWatch))
	defer span.End()
	ans := p.alerts.Router.RoutePayload(pl, p.clock.Now())
	span.SetAttributes(tracing.KeyTasks.Int(len(ans.Tasks)))
	if len(ans.Tasks) > 0 {
		// The tasks' sends are spans under the alarm's: one trace.
		if err := detached.Call(rctx, alert.DefaultSendTimeout, func(ctx context.Context) error {
			return p.alerts.Sender.SendBatch(ctx, ans.Tasks)
		}); err != nil {
			delay := retryDelay(j.msg.ReceiveCount)
			log.WarnContext(rctx, "alert tasks not queued; the alarm comes back to try again", "source", alert.SourceCloudWatch,
				"tasks", len(ans.Tasks), "retry_after", delay.Seconds(), "err", err)
			p.handBack(j, back{why: backRetry, after: delay})
			return true
		}
	}
	if w := p.alerts.Alarms; w != nil {
		for _, it := range pl.Items {
			if it.Alert.Status == alert.StatusFiring && it.Alert.EventID != "" {
				w.AlarmFiring(rctx, alert.SourceCloudWatch, it.Alert.EventID)
			}
		}
		for _, alarm := range pl.Cleared {
			w.AlarmCleared(rctx, alert.SourceCloudWatch, alarm)
		}
	}
	p.alerts.Metrics.Record(ctx, log, alert.SourceCloudWatch, pl, ans)
	p.outcomes.drop(j)
	p.ack(j)
	return true
}
