package report

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/tracing"
)

// genAIProvider is the gen_ai.provider.name of a provider, by the
// OpenTelemetry generative-AI conventions.
func genAIProvider(name string) string {
	if name == ProviderBedrock {
		return "aws.bedrock"
	}
	return name
}

// StartChat starts the CLIENT span of one model call (a report's or an
// investigation turn's), "chat {model}",
// with the gen_ai request attributes; the prompt and the answer are
// never recorded.
func StartChat(ctx context.Context, provider string, req Request) (context.Context, trace.Span) {
	if !tracing.On() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	attrs := []attribute.KeyValue{attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", genAIProvider(provider)), attribute.String("gen_ai.request.model", req.Model)}
	if req.MaxTokens > 0 {
		attrs = append(attrs, attribute.Int("gen_ai.request.max_tokens", req.MaxTokens))
	}
	return tracing.Start(ctx, "chat "+req.Model, trace.SpanKindClient, attrs...)
}

// EndChat records the call's usage and finish reason and ends span.
func EndChat(span trace.Span, resp Response, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("gen_ai.usage.input_tokens", resp.InputTokens),
			attribute.Int("gen_ai.usage.output_tokens", resp.OutputTokens))
		if resp.FinishReason != "" {
			span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{resp.FinishReason}))
		}
		if err != nil {
			var pe *Error
			kind := "error"
			if errors.As(err, &pe) && pe.StatusCode != 0 {
				kind = "status_" + strconv.Itoa(pe.StatusCode)
			}
			span.SetAttributes(attribute.String("error.type", kind))
			span.SetStatus(codes.Error, kind)
		}
	}
	span.End()
}

// traceReport puts the report's status on its span.
func traceReport(span trace.Span, res Result) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("autodiag.report.status", res.Status), attribute.Int("autodiag.report.attempts", res.Attempts))
	if res.Status == StatusFailed {
		span.SetStatus(codes.Error, res.Status)
	}
}
