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
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
	// maxPooledBuffer: a request buffer larger than this (a batch of
	// unusually large spans) is not kept for the next export.
	maxPooledBuffer = 4 << 20
	// maxRetryAfter caps a collector's Retry-After: a longer one ends the
	// export (the spans are dropped) rather than holding the queue.
	maxRetryAfter = 30 * time.Second
)

// Exporter posts spans to an OTLP/HTTP collector as protobuf
// (application/x-protobuf), retrying 429, 502, 503 and 504 as the OTLP
// specification says (honouring Retry-After), within the export's context.
// It writes the ExportTraceServiceRequest with protowire (encode.go): the
// official exporter and the collector package's generated request type
// link gRPC.
type Exporter struct {
	url      string
	headers  map[string]string
	gzip     bool
	timeout  time.Duration
	client   *http.Client
	resource []byte // the Resource message's content, encoded once
	m        *Metrics
	sleep    func(ctx context.Context, d time.Duration) error
	// mu guards the buffers reused across exports: a batch's request is
	// tens of KiB, a gzip writer's state 1 MiB.
	mu   sync.Mutex
	raw  []byte
	zbuf bytes.Buffer
	zw   *gzip.Writer
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
	e := &Exporter{url: o.URL, headers: o.Headers, gzip: o.Gzip, timeout: cmpDuration(o.Timeout, DefaultTimeout),
		client: c, resource: encodeResource(o.Resource), m: o.Metrics, sleep: sleepCtx}
	return e
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
	// The batch processor exports one batch at a time; the lock keeps the
	// reused buffers safe should a caller not.
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.shrink()
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

// retryAfterCap bounds a collector's Retry-After as read: anything past
// maxRetryAfter fails the export, and the cap keeps the seconds from
// overflowing a time.Duration into a short or negative wait.
const retryAfterCap = 24 * time.Hour

// retryAfter reads a Retry-After header: seconds or an HTTP date, at most
// retryAfterCap; 0 when absent or unreadable.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	s, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err == nil && s >= 0:
		// Capped before the multiplication: a large number must not
		// overflow into a short or negative wait.
		return time.Duration(min(s, int64(retryAfterCap/time.Second))) * time.Second
	case errors.Is(err, strconv.ErrRange) && v[0] != '-':
		return retryAfterCap
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), retryAfterCap)
	}
	return 0
}

// Shutdown implements sdktrace.SpanExporter.
func (e *Exporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}

// encode writes the ExportTraceServiceRequest of spans (see encode.go),
// gzipped when asked, into the exporter's buffers; e.mu is held.
func (e *Exporter) encode(spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	e.raw = appendRequest(e.raw[:0], e.resource, spans)
	if !e.gzip {
		return e.raw, nil
	}
	e.zbuf.Reset()
	if e.zw == nil {
		// The fastest level: the spans of a batch are alike and compress
		// well at it, and the export runs beside the agent's work.
		e.zw, _ = gzip.NewWriterLevel(&e.zbuf, gzip.BestSpeed)
	} else {
		e.zw.Reset(&e.zbuf)
	}
	if _, err := e.zw.Write(e.raw); err != nil {
		return nil, err
	}
	if err := e.zw.Close(); err != nil {
		return nil, err
	}
	return e.zbuf.Bytes(), nil
}

// shrink lets go of buffers a batch of unusually large spans grew.
func (e *Exporter) shrink() {
	if cap(e.raw) > maxPooledBuffer {
		e.raw = nil
	}
	if e.zbuf.Cap() > maxPooledBuffer {
		e.zbuf = bytes.Buffer{}
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
