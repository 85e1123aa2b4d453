package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The exporter's bounds. An export's context (the batch processor's
// export timeout, Timeout) bounds the whole of it, retries included.
const (
	// maxResponseBytes bounds what is read of a collector's answer; the
	// answer's content is not used (partial success is not acted on).
	maxResponseBytes = 64 << 10
	// retryInitial and retryMax shape the backoff between attempts when
	// the collector gives no Retry-After.
	retryInitial = 500 * time.Millisecond
	retryMax     = 5 * time.Second
	// maxRetryAfter caps a collector's Retry-After: a longer one ends the
	// export (the spans are dropped) rather than holding the queue.
	maxRetryAfter = 30 * time.Second
)

// Exporter posts spans to an OTLP/HTTP collector as protobuf
// (application/x-protobuf), retrying 429, 502, 503 and 504 as the OTLP
// specification says (honouring Retry-After), within the export's context.
// It encodes with the OTLP message types and writes the outer
// ExportTraceServiceRequest (field 1, repeated ResourceSpans) with
// protowire, as the collector package's type links gRPC.
type Exporter struct {
	url      string
	headers  map[string]string
	gzip     bool
	timeout  time.Duration
	client   *http.Client
	resource *resourcepb.Resource
	m        *Metrics
	sleep    func(ctx context.Context, d time.Duration) error
}

// ExporterOptions are what NewExporter needs; URL is the full
// {endpoint}/v1/traces.
type ExporterOptions struct {
	URL     string
	Headers map[string]string
	Gzip    bool
	// Timeout bounds one export when its context has no deadline.
	Timeout  time.Duration
	Client   *http.Client // nil = a client of its own
	Resource []attribute.KeyValue
	Metrics  *Metrics
}

// NewExporter returns an exporter for o.
func NewExporter(o ExporterOptions) *Exporter {
	c := o.Client
	if c == nil {
		// Redirects are not followed: the endpoint is the one checked
		// (never the metadata service), not wherever an answer points.
		c = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Exporter{url: o.URL, headers: o.Headers, gzip: o.Gzip, timeout: cmpDuration(o.Timeout, DefaultTimeout),
		client: c, resource: &resourcepb.Resource{Attributes: attrs(o.Resource)}, m: o.Metrics, sleep: sleepCtx}
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// ErrExport is wrapped by every error ExportSpans returns.
var ErrExport = errors.New("tracing: export")

// ExportSpans implements sdktrace.SpanExporter.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	body, err := e.encode(spans)
	if err != nil {
		e.failed(len(spans))
		return fmt.Errorf("%w: encode: %w", ErrExport, err)
	}
	wait := retryInitial
	for attempt := 1; ; attempt++ {
		retryAfter, err := e.post(ctx, body)
		if err == nil {
			e.m.exported(len(spans))
			return nil
		}
		var re *retryable
		if !errors.As(err, &re) {
			e.failed(len(spans))
			return err
		}
		d := wait - rand.N(wait/2+1)
		if retryAfter > 0 {
			d = retryAfter
		}
		if d > maxRetryAfter {
			e.failed(len(spans))
			return fmt.Errorf("%w: collector asks to wait %.0f s (more than %.0f s): %w", ErrExport, d.Seconds(), maxRetryAfter.Seconds(), err)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			e.failed(len(spans))
			return fmt.Errorf("%w: no time left to retry after attempt %d: %w", ErrExport, attempt, err)
		}
		if serr := e.sleep(ctx, d); serr != nil {
			e.failed(len(spans))
			return fmt.Errorf("%w: %w", ErrExport, err)
		}
		wait = min(wait*2, retryMax)
	}
}

func (e *Exporter) failed(n int) {
	e.m.exportFailed()
	e.m.dropped(n)
}

// retryable is an answer the OTLP/HTTP specification retries (status),
// or a connection that failed (err).
type retryable struct {
	status int
	err    error
}

func (r *retryable) Error() string {
	if r.err != nil {
		return "connection failed: " + r.err.Error()
	}
	return "collector answered " + strconv.Itoa(r.status)
}

// post sends body once; a retryable answer is a *retryable with its
// Retry-After (0 when none).
func (e *Exporter) post(ctx context.Context, body []byte) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrExport, err)
	}
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if e.gzip {
		req.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("%w: %w", ErrExport, ctx.Err())
		}
		// A connection refused or reset is worth another try.
		return 0, fmt.Errorf("%w: %w", ErrExport, &retryable{err: err})
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxResponseBytes))
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK, http.StatusAccepted, http.StatusNoContent:
		return 0, nil
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return retryAfter(resp.Header.Get("Retry-After")), fmt.Errorf("%w: %w", ErrExport, &retryable{status: resp.StatusCode})
	}
	return 0, fmt.Errorf("%w: collector answered %d", ErrExport, resp.StatusCode)
}

// retryAfter reads a Retry-After header: seconds or an HTTP date; 0 when
// absent or unreadable.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// Shutdown implements sdktrace.SpanExporter.
func (e *Exporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}

// encode writes the ExportTraceServiceRequest of spans: one
// ResourceSpans, a ScopeSpans per instrumentation scope.
func (e *Exporter) encode(spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	rs := &tracepb.ResourceSpans{Resource: e.resource}
	scopes := map[string]*tracepb.ScopeSpans{}
	for _, s := range spans {
		sc := s.InstrumentationScope()
		ss := scopes[sc.Name+"\x00"+sc.Version]
		if ss == nil {
			ss = &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version}, SchemaUrl: sc.SchemaURL}
			scopes[sc.Name+"\x00"+sc.Version] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanPB(s))
	}
	inner, err := proto.Marshal(rs)
	if err != nil {
		return nil, err
	}
	out := protowire.AppendTag(nil, 1, protowire.BytesType)
	out = protowire.AppendBytes(out, inner)
	if !e.gzip {
		return out, nil
	}
	var buf bytes.Buffer
	// The fastest level: the spans of a batch are alike and compress well
	// at it, and the export runs beside the agent's work.
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if _, err := zw.Write(out); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func spanPB(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Name:                   s.Name(),
		Kind:                   tracepb.Span_SpanKind(s.SpanKind()), // the same numbers, internal = 1 … consumer = 5
		StartTimeUnixNano:      uint64(s.StartTime().UnixNano()),
		EndTimeUnixNano:        uint64(s.EndTime().UnixNano()),
		Attributes:             attrs(s.Attributes()),
		DroppedAttributesCount: uint32(s.DroppedAttributes()),
		DroppedEventsCount:     uint32(s.DroppedEvents()),
		DroppedLinksCount:      uint32(s.DroppedLinks()),
		Flags:                  uint32(sc.TraceFlags()) | flagHasIsRemote(s.Parent()),
	}
	if par := s.Parent(); par.IsValid() {
		psid := par.SpanID()
		p.ParentSpanId = psid[:]
	}
	switch st := s.Status(); st.Code {
	case codes.Error:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: st.Description}
	case codes.Ok:
		p.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	}
	for _, ev := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{TimeUnixNano: uint64(ev.Time.UnixNano()), Name: ev.Name,
			Attributes: attrs(ev.Attributes), DroppedAttributesCount: uint32(ev.DroppedAttributeCount)})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{TraceId: ltid[:], SpanId: lsid[:], TraceState: l.SpanContext.TraceState().String(),
			Attributes: attrs(l.Attributes), DroppedAttributesCount: uint32(l.DroppedAttributeCount),
			Flags: uint32(l.SpanContext.TraceFlags()) | flagHasIsRemote(l.SpanContext)})
	}
	return p
}

// flagHasIsRemote sets the OTLP span flags' "has is_remote" bit (0x100)
// and "is_remote" (0x200) for a parent or link.
func flagHasIsRemote(sc trace.SpanContext) uint32 {
	if !sc.IsValid() {
		return 0x100
	}
	if sc.IsRemote() {
		return 0x300
	}
	return 0x100
}

func attrs(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRINGSLICE:
		ss := v.AsStringSlice()
		vals := make([]*commonpb.AnyValue, len(ss))
		for i, s := range ss {
			vals[i] = &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vals}}}
	case attribute.INT64SLICE:
		is := v.AsInt64Slice()
		vals := make([]*commonpb.AnyValue, len(is))
		for i, n := range is {
			vals[i] = &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: n}}
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vals}}}
	default:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.String()}}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
