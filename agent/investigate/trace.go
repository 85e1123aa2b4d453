package investigate

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/tracing"
)

// startTool starts the execute_tool span of one tool call; the task it
// runs is sent under it, so the tool's run joins the trace.
func startTool(ctx context.Context, callID string) (context.Context, trace.Span) {
	return tracing.Start(ctx, "execute_tool", trace.SpanKindInternal, attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.call.id", cut(callID, 64)))
}

// endTool names the span by the tool when it is one offered (a name the
// model made up stays out of span names), records the call's result and
// its task, and ends it.
func endTool(span trace.Span, c report.Call) {
	if span.IsRecording() {
		if c.Result != ResultNotOffered {
			span.SetName("execute_tool " + c.Tool)
			span.SetAttributes(attribute.String("gen_ai.tool.name", c.Tool))
		}
		span.SetAttributes(attribute.String("autodiag.tool.result", c.Result))
		if c.TaskID != "" {
			span.SetAttributes(tracing.KeyTaskID.String(c.TaskID))
		}
		if c.RanOn != nil {
			span.SetAttributes(tracing.KeyRanOnInstanceID.String(c.RanOn.InstanceID), tracing.KeyRanOnHostname.String(c.RanOn.Hostname))
		}
		if c.Result != ResultRan {
			span.SetStatus(codes.Error, c.Result)
		}
	}
	span.End()
}
