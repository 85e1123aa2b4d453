package alert

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/tracing"
)

// traceAnswer puts what the alert listener made of a payload on its span: the
// source and the counts, never an alert's text.
func traceAnswer(span trace.Span, source string, ans Answer) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(tracing.KeyAlertSource.String(source), tracing.KeyTasks.Int(len(ans.Tasks)),
		tracing.KeyAlertsIgnored.Int(len(ans.Ignored)), tracing.KeyAlertsRejected.Int(len(ans.Rejected)))
}
