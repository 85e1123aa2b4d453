package worker

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// Tracing says how the worker's spans name the task queue.
type Tracing struct {
	// System is the messaging.system (tracing.SystemSQS or SystemMemory);
	// Queue the messaging.destination.name.
	System, Queue string
}

type traceOptions = Tracing

// process starts the process span of m under the producer's context
// (traceparent, else AWSTraceHeader); a malformed parent is counted and
// ignored: the task gets a trace of its own.
func (o traceOptions) process(m *queue.Message) (context.Context, trace.Span) {
	tp, xray := m.Attributes[tracing.AttrTraceparent], m.TraceHeader
	var parent tracing.Parent
	if tp != "" || xray != "" {
		parent = tracing.Extract(tp, m.Attributes[tracing.AttrTracestate], xray)
		if parent.Malformed {
			tracing.CountInvalid(tracing.SourceSQS)
		}
	}
	if !tracing.On() {
		return context.Background(), trace.SpanFromContext(context.Background())
	}
	return tracing.StartProcess(parent.SC, o.System, o.Queue, m.ID, trace.SpanContext{})
}

// receiveSpan records a receive that brought msgs, started at start, with
// a link to each message's producer.
func (o traceOptions) receiveSpan(msgs []*queue.Message, start time.Time) {
	if !tracing.On() || len(msgs) == 0 {
		return
	}
	_, span := tracing.StartReceive(o.System, o.Queue, start)
	span.SetAttributes(tracing.KeyMessagingBatchCount.Int(len(msgs)))
	for _, m := range msgs {
		if tp := m.Attributes[tracing.AttrTraceparent]; tp != "" || m.TraceHeader != "" {
			if p := tracing.Extract(tp, "", m.TraceHeader); p.SC.IsValid() {
				span.AddLink(trace.Link{SpanContext: p.SC})
			}
		}
	}
	span.End()
}

// traceTask names the task on its process span: id, diagnostic, host (an
// allow-listed name), never params or the alert's text.
func traceTask(span trace.Span, t task.Task) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.KeyTaskID.String(t.ID), tracing.KeyDiagnostic.String(t.Diagnostic), tracing.KeyHost.String(t.Host))
	if t.Alert.Source != "" {
		span.SetAttributes(tracing.KeyAlertSource.String(t.Alert.Source))
	}
}

// traceRanOn names the agent that runs the task's diagnostic on span.
func traceRanOn(span trace.Span, r taskview.RanOn) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.KeyRanOnInstanceID.String(r.InstanceID), tracing.KeyRanOnHostname.String(r.Hostname))
}

// traceRun puts a run's result on its span: exit code, outcome,
// truncated; never its output.
func traceRun(span trace.Span, res runner.Result) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.KeyExitCode.Int(res.ExitCode), tracing.KeyOutcome.String(res.Outcome),
		tracing.KeyTruncated.Bool(res.Truncated))
	if res.Outcome == outcome.Failed || res.Outcome == outcome.TimedOut {
		span.SetStatus(codes.Error, res.Outcome)
	}
}

// traceDecision puts the limiter's decision on its span.
func traceDecision(span trace.Span, dec limiter.Decision, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, "limiter call failed")
		return
	}
	span.SetAttributes(tracing.KeyRule.String(dec.Rule), tracing.KeyAllowed.Bool(dec.Allowed), tracing.KeyReason.String(dec.Reason))
	if dec.RetryAfter > 0 {
		span.SetAttributes(tracing.KeyRetryAfter.Float64(dec.RetryAfter.Seconds()))
	}
}

// traceOutcome puts the task's one outcome on its process span.
func traceOutcome(span trace.Span, outcome, reason string, level slog.Level) {
	if span == nil || !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.KeyOutcome.String(outcome))
	if reason != "" {
		span.SetAttributes(tracing.KeyReason.String(reason))
	}
	if level >= slog.LevelWarn {
		span.SetStatus(codes.Error, outcome)
	}
}

// traceIDs are the trace id and, when the trace is sampled, the span id
// of j's process span, for its record.
func traceIDs(j *job) (traceID, spanID string) {
	if j.ctx == nil {
		return "", ""
	}
	sc := trace.SpanContextFromContext(j.ctx)
	if !sc.IsValid() {
		return "", ""
	}
	if sc.IsSampled() {
		return sc.TraceID().String(), sc.SpanID().String()
	}
	return sc.TraceID().String(), ""
}

// startUpload starts the span of the output's upload to S3, when the
// agent uploads (results.s3, uploading); nil otherwise.
func startUpload(j *job, uploading bool) trace.Span {
	if !uploading || !tracing.On() {
		return nil
	}
	_, span := tracing.Start(j.ctx, "upload output", trace.SpanKindClient, tracing.KeyTaskID.String(j.task.ID))
	return span
}

// endUpload records the upload's result (failed, or the object's
// presence) and ends span.
func endUpload(span trace.Span, rec state.TaskRecord) {
	if span == nil {
		return
	}
	if rec.OutputUpload != "" {
		span.SetAttributes(tracing.KeyUpload.String(rec.OutputUpload))
		span.SetStatus(codes.Error, rec.OutputUpload)
	} else if rec.OutputURL != "" {
		span.SetAttributes(tracing.KeyUpload.String("ok"))
	}
	span.End()
}
