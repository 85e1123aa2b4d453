package notify

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/tracing"
)

// deliverySpan starts the CLIENT span of one delivery to a sink, under
// the task's process span named by the event's task (trace_id, span_id);
// a drain event or an untraced task gets a trace of its own.
func deliverySpan(ctx context.Context, dl Delivery) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	var ev struct {
		Task *struct {
			TraceID string `json:"trace_id"`
			SpanID  string `json:"span_id"`
		} `json:"task"`
	}
	if json.Unmarshal(dl.Body, &ev) == nil && ev.Task != nil {
		ctx = tracing.ContextWithRemote(ctx, ev.Task.TraceID, ev.Task.SpanID)
	}
	return tracing.Start(ctx, "notify "+dl.Sink, trace.SpanKindClient, tracing.KeySink.String(dl.Sink),
		tracing.KeyEvent.String(string(dl.Event)), tracing.KeyAttempt.Int(dl.Attempt))
}

// endDelivery records how the delivery went and ends span.
func endDelivery(span trace.Span, err error) {
	if span.IsRecording() && err != nil {
		kind := "error"
		var se *SendError
		if errors.As(err, &se) && se.Status != 0 {
			kind = "status_" + strconv.Itoa(se.Status)
		}
		span.SetStatus(codes.Error, kind)
	}
	span.End()
}
