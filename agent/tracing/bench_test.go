package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/tracing"
)

// BenchmarkTaskSpans is the tracing cost of one task on the agent: the
// process span and its six steps, with attributes as the worker sets
// them, batched and exported (gzip) to a collector that discards them.
func BenchmarkTaskSpans(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	s, err := tracing.Resolve(tracing.Config{Endpoint: srv.URL, SamplerRatio: 1, Compression: tracing.CompressionGzip},
		func(string) (string, bool) { return "", false }, nil)
	if err != nil {
		b.Fatal(err)
	}
	tr := tracing.Setup(tracing.Options{Settings: s})
	defer func() { _ = tr.Shutdown(context.Background()) }()
	parent, _ := tracing.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ctx, span := tracing.StartProcess(parent, tracing.SystemSQS, "tasks", "m-1", trace.SpanContext{})
		span.SetAttributes(tracing.KeyTaskID.String("t-1"), tracing.KeyDiagnostic.String("uptime"), tracing.KeyHost.String("web-1"))
		for _, name := range []string{"validate", "claim", "limiter", "run uptime", "record"} {
			_, s := tracing.Start(ctx, name, trace.SpanKindInternal)
			s.SetAttributes(tracing.KeyOutcome.String("succeeded"))
			s.End()
		}
		span.SetAttributes(tracing.KeyOutcome.String("succeeded"))
		span.End()
	}
	b.StopTimer()
	_ = tr.ForceFlush(context.Background())
}

// BenchmarkExport is one export of a full batch (512 spans of a task's
// shape), per span.
func BenchmarkExport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	var spans []sdktrace.ReadOnlySpan
	rec := recorder{spans: &spans}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := tp.Tracer("bench")
	for range 512 / 6 {
		ctx, span := tr.Start(context.Background(), "process tasks", trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(tracing.KeyMessagingSystem.String("aws_sqs"), tracing.KeyMessagingDestination.String("tasks"),
				tracing.KeyMessagingMessageID.String("0a1b2c3d-4e5f-6789-abcd-ef0123456789"), tracing.KeyTaskID.String("t-1")))
		for _, name := range []string{"validate", "claim", "limiter", "run uptime", "record"} {
			_, s := tr.Start(ctx, name)
			s.SetAttributes(tracing.KeyOutcome.String("succeeded"))
			s.End()
		}
		span.End()
	}
	for _, gz := range []bool{false, true} {
		b.Run(map[bool]string{false: "none", true: "gzip"}[gz], func(b *testing.B) {
			exp := tracing.NewExporter(tracing.ExporterOptions{URL: srv.URL + "/v1/traces", Gzip: gz})
			b.ReportAllocs()
			for b.Loop() {
				if err := exp.ExportSpans(context.Background(), spans); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
		})
	}
}

type recorder struct{ spans *[]sdktrace.ReadOnlySpan }

func (r recorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r recorder) OnEnd(s sdktrace.ReadOnlySpan)                   { *r.spans = append(*r.spans, s) }
func (r recorder) Shutdown(context.Context) error                  { return nil }
func (r recorder) ForceFlush(context.Context) error                { return nil }
