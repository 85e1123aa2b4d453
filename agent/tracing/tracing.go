package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every autodiag span.
const ScopeName = "github.com/autodiag/autodiag"

// The batch span processor's bounds: the queue of ended spans waiting for
// an export is bounded (a span past it is dropped, never waited for), and
// a batch is exported at least every batchDelay.
const (
	maxQueueSize = 2048
	maxBatchSize = 512
	batchDelay   = 2 * time.Second
)

// on is whether Start makes spans: false until Setup installs a provider,
// so that with tracing off an instrumented call costs one atomic load.
// The tracer provider is OpenTelemetry's global one: instrumented
// packages find it without it being passed through every constructor,
// and the process has one.
var on atomic.Bool

// tracer is the provider's tracer while on is true: looked up once, not
// per span.
var tracer atomic.Pointer[trace.Tracer]

// noopSpan is the span Start returns while tracing is off.
var noopSpan trace.Span = noop.Span{}

// Start starts a span named name, of kind, under ctx's span; with
// tracing off it returns ctx and a no-op span.
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, noopSpan
	}
	return (*tracer.Load()).Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// StartWith is Start with further options (links, a start time, a new root).
func StartWith(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, noopSpan
	}
	return (*tracer.Load()).Start(ctx, name, opts...)
}

// On reports whether tracing is on.
func On() bool { return on.Load() }

// Fail marks span as failed with err's text; err must hold no secret.
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codesError, err.Error())
	}
}

// IDs are the trace and span id of ctx's span, hex, "" when none.
func IDs(ctx context.Context) (traceID, spanID string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return sc.TraceID().String(), sc.SpanID().String()
}

// Remote is the span context of a span recorded elsewhere by its ids (a
// task record's), sampled: a child of it is recorded. Invalid ids give an
// invalid context.
func Remote(traceID, spanID string) trace.SpanContext {
	tid, err1 := trace.TraceIDFromHex(traceID)
	sid, err2 := trace.SpanIDFromHex(spanID)
	if err1 != nil || err2 != nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

// ContextWithRemote puts the span context of traceID/spanID into ctx as
// the parent of the spans started under it; ctx unchanged when tracing is
// off or the ids are invalid.
func ContextWithRemote(ctx context.Context, traceID, spanID string) context.Context {
	if !on.Load() {
		return ctx
	}
	sc := Remote(traceID, spanID)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Options are what Setup needs besides the settings.
type Options struct {
	Settings Settings
	// Resource describes this process: service.version, host.id,
	// cloud.provider, cloud.region, aws.autoscaling.group.name.
	Resource []attribute.KeyValue
	Metrics  *Metrics
	Logger   *slog.Logger
	// Client posts the exports; nil = a client of the exporter's own.
	Client *http.Client
}

// Tracing is the installed provider; Shutdown exports what is queued.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// Setup installs the tracer provider that s describes as OpenTelemetry's
// global one and turns Start on; with tracing off (s.On false) it installs
// nothing and returns a Tracing whose Shutdown does nothing.
func Setup(o Options) *Tracing {
	s := o.Settings
	if o.Metrics != nil {
		metrics.Store(o.Metrics)
	}
	SetLinkTemplate(s.LinkTemplate)
	if !s.On {
		return &Tracing{}
	}
	res := append([]attribute.KeyValue{attribute.String("service.name", s.ServiceName)}, o.Resource...)
	for k, v := range s.ResourceAttrs {
		if k != "service.name" {
			res = append(res, attribute.String(k, v))
		}
	}
	exp := NewExporter(ExporterOptions{URL: s.TracesURL, Headers: s.Headers, Gzip: s.Compression == CompressionGzip,
		Timeout: s.Timeout, Client: o.Client, Resource: res, Metrics: o.Metrics})
	bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithMaxQueueSize(maxQueueSize),
		sdktrace.WithMaxExportBatchSize(maxBatchSize), sdktrace.WithBatchTimeout(batchDelay), sdktrace.WithExportTimeout(s.Timeout))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bsp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(s.SamplerRatio))))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tr := tp.Tracer(ScopeName)
	tracer.Store(&tr)
	if o.Logger != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(newErrorLog(o.Logger).handle))
		o.Logger.Info("tracing on", "endpoint_host", hostOf(s.TracesURL), "sampler_ratio", s.SamplerRatio,
			"compression", s.Compression, "timeout", s.Timeout.Seconds())
	}
	on.Store(true)
	return &Tracing{tp: tp}
}

// Shutdown exports the spans still queued, within ctx, and stops the
// provider; Start makes no more spans.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	on.Store(false)
	if err := t.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// ForceFlush exports what is queued now, within ctx.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// linkTemplate is tracing.link_template, set by Setup whether tracing is
// on or not (a producer's trace may be exported elsewhere).
var linkTemplate atomic.Pointer[string]

// SetLinkTemplate sets the template Link fills (tracing.link_template),
// for a process that shows tasks without tracing (autodiag show).
func SetLinkTemplate(t string) {
	if t != "" {
		linkTemplate.Store(&t)
	}
}

// Link is the link for people to traceID (tracing.link_template); "" when
// no template is set or traceID is "".
func Link(traceID string) string {
	t := linkTemplate.Load()
	if t == nil {
		return ""
	}
	return Config{LinkTemplate: *t}.Link(traceID)
}
