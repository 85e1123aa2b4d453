package supervisor

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/lifecycle"
)

// startDrainSpan starts the drain's span, the root of a trace of its own:
// its heartbeats and its completion are recorded under it.
func startDrainSpan(ctx context.Context, tr drain.Trigger) (context.Context, trace.Span) {
	return tracing.StartWith(ctx, "drain", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String("autodiag.drain.source", tr.Source), attribute.String("autodiag.drain.reason", tr.Reason)))
}

// traceDrainWork records what the drain's work came to.
func traceDrainWork(span trace.Span, p drain.Progress) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("autodiag.drain.released", p.Released), attribute.Int("autodiag.drain.cancelled", p.Cancelled),
			attribute.Bool("autodiag.drain.timed_out", p.TimedOut))
	}
}

// traceEnding records how the drain ended.
func traceEnding(span trace.Span, ending string, completeErr error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("autodiag.drain.ending", ending))
	if completeErr != nil {
		span.SetStatus(codes.Error, "completion failed")
	}
}

// startCompletion starts the CLIENT span of CompleteLifecycleAction.
func startCompletion(ctx context.Context, a lifecycle.Action, result string) (context.Context, trace.Span) {
	return tracing.Start(ctx, "CompleteLifecycleAction", trace.SpanKindClient, attribute.String("rpc.system", "aws-api"),
		attribute.String("rpc.service", "AutoScaling"), attribute.String("rpc.method", "CompleteLifecycleAction"),
		attribute.String("aws.autoscaling.hook.name", a.HookName), attribute.String("aws.autoscaling.group.name", a.ASGName),
		attribute.String("aws.autoscaling.lifecycle_action.result", result))
}
