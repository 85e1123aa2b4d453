package tracing

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// messaging.system values: SQS's registered one, and the embedded queue's.
const (
	SystemSQS    = "aws_sqs"
	SystemMemory = "autodiag_memory"
)

// Attribute keys of the OpenTelemetry semantic conventions the spans use.
const (
	KeyMessagingSystem      = attribute.Key("messaging.system")
	KeyMessagingOperation   = attribute.Key("messaging.operation.type")
	KeyMessagingOpName      = attribute.Key("messaging.operation.name")
	KeyMessagingDestination = attribute.Key("messaging.destination.name")
	KeyMessagingMessageID   = attribute.Key("messaging.message.id")
	KeyMessagingBatchCount  = attribute.Key("messaging.batch.message_count")
)

// StartSend starts a send span (PRODUCER) to destination of system; the
// caller injects the returned context into the message.
func StartSend(ctx context.Context, system, destination string) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, noopSpan
	}
	return Start(ctx, "send "+destination, trace.SpanKindProducer, KeyMessagingSystem.String(system),
		KeyMessagingOperation.String("send"), KeyMessagingOpName.String("send"), KeyMessagingDestination.String(destination))
}

// Sent records the id the queue gave the message.
func Sent(span trace.Span, id string) {
	if span.IsRecording() {
		span.SetAttributes(KeyMessagingMessageID.String(id))
	}
}

// StartReceive starts a receive span (CLIENT) as a new root at start: it
// is ended only when messages came (a long poll that brought nothing is
// not a span), with links to each message's producer added by the caller.
func StartReceive(system, destination string, start time.Time) (context.Context, trace.Span) {
	if !on.Load() {
		return context.Background(), noopSpan
	}
	return StartWith(context.Background(), "receive "+destination, trace.WithSpanKind(trace.SpanKindClient), trace.WithNewRoot(),
		trace.WithTimestamp(start), trace.WithAttributes(KeyMessagingSystem.String(system),
			KeyMessagingOperation.String("receive"), KeyMessagingOpName.String("receive"), KeyMessagingDestination.String(destination)))
}

// StartProcess starts the process span (CONSUMER) of one received
// message: a child of the producer's context p (so one alert is one
// trace) with a link to it too, as the messaging conventions ask; a new
// root when the message carried none.
func StartProcess(p trace.SpanContext, system, destination, messageID string, receive trace.SpanContext) (context.Context, trace.Span) {
	if !on.Load() {
		return context.Background(), noopSpan
	}
	ctx := context.Background()
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		KeyMessagingSystem.String(system), KeyMessagingOperation.String("process"), KeyMessagingOpName.String("process"),
		KeyMessagingDestination.String(destination), KeyMessagingMessageID.String(messageID))}
	if p.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, p)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: p}))
	}
	if receive.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: receive}))
	}
	return StartWith(ctx, "process "+destination, opts...)
}

// autodiag's own attributes, under the autodiag. namespace.
const (
	KeyTaskID      = attribute.Key("autodiag.task.id")
	KeyDiagnostic  = attribute.Key("autodiag.diagnostic")
	KeyHost        = attribute.Key("autodiag.host")
	KeyAlertSource = attribute.Key("autodiag.alert.source")
	KeyOutcome     = attribute.Key("autodiag.outcome")
	KeyReason      = attribute.Key("autodiag.reason")
	KeyExitCode    = attribute.Key("process.exit.code")
	KeyTruncated   = attribute.Key("autodiag.output.truncated")
	KeyUpload      = attribute.Key("autodiag.output.upload")
	KeyRule        = attribute.Key("autodiag.limiter.rule")
	KeyAllowed     = attribute.Key("autodiag.limiter.allowed")
	KeyRetryAfter  = attribute.Key("autodiag.limiter.retry_after")
	KeySink        = attribute.Key("autodiag.sink")
	KeyEvent       = attribute.Key("autodiag.event")
	KeyAttempt     = attribute.Key("autodiag.attempt")

	// KeyRanOnInstanceID and KeyRanOnHostname name the agent that ran
	// the diagnostic (the record's ran_on).
	KeyRanOnInstanceID = attribute.Key("autodiag.ran_on.instance_id")
	KeyRanOnHostname   = attribute.Key("autodiag.ran_on.hostname")

	// The approval of a task whose diagnostic needs one: the decision
	// (approved, denied, timeout), who made it, why and via what (api,
	// cli, slack).
	KeyApproval       = attribute.Key("autodiag.approval.decision")
	KeyApprovalBy     = attribute.Key("autodiag.approval.by")
	KeyApprovalReason = attribute.Key("autodiag.approval.reason")
	KeyApprovalVia    = attribute.Key("autodiag.approval.via")
)

// StartServer starts the SERVER span of an HTTP request to route
// ("/v1/alerts/alertmanager"), named "POST /v1/alerts/alertmanager",
// continuing the caller's W3C traceparent; a malformed one is counted and
// ignored. With tracing off it makes no span, and ctx still carries the
// caller's context.
func StartServer(r *http.Request, route string) (context.Context, trace.Span) {
	ctx, name := r.Context(), r.Method+" "+route
	tp := r.Header.Get("Traceparent")
	if tp == "" {
		if !on.Load() {
			return ctx, noopSpan
		}
		return Start(ctx, name, trace.SpanKindServer, attribute.String("http.request.method", r.Method), attribute.String("http.route", route))
	}
	p := Extract(tp, r.Header.Get("Tracestate"), "")
	if p.Malformed {
		CountInvalid(SourceHTTP)
	}
	if p.SC.IsValid() {
		// Off, the caller's context still rides on to the messages sent
		// under ctx: an alert listener without tracing passes the trace on.
		ctx = trace.ContextWithRemoteSpanContext(ctx, p.SC)
	}
	if !on.Load() {
		return ctx, noopSpan
	}
	return Start(ctx, name, trace.SpanKindServer, attribute.String("http.request.method", r.Method), attribute.String("http.route", route))
}

// The alert listener's attributes.
const (
	KeyTasks          = attribute.Key("autodiag.tasks")
	KeyAlertsIgnored  = attribute.Key("autodiag.alerts.ignored")
	KeyAlertsRejected = attribute.Key("autodiag.alerts.rejected")
)
