// Package tracing carries one OpenTelemetry trace per alert from the
// alert listener through the task queue to the run, its record, its notifications
// and its report. It owns the tracer provider (off by default), the
// configuration (the `tracing:` section and the standard OTEL_*
// environment variables), an OTLP/HTTP protobuf exporter written on the
// SDK's SpanExporter seam (the official one links gRPC, +23 MB), the SQS
// carrier (traceparent/tracestate message attributes, the AWSTraceHeader
// system attribute) and a slog handler that puts trace_id and span_id on
// the log lines written while a span is in the context.
//
// Instrumented code calls Start: with tracing off it returns the context
// it was given and a no-op span, without allocating.
package tracing
