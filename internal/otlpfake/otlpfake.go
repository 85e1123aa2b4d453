// Package otlpfake is an in-process OTLP/HTTP trace receiver for tests:
// it decodes protobuf exports (gzip or not) with the OTLP message types
// and records every span with its resource, and can answer a number of
// exports with a retryable status first.
package otlpfake

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// maxBody bounds one export the receiver reads.
const maxBody = 16 << 20

// Span is one received span, its ids hex and its attributes as strings.
type Span struct {
	TraceID, SpanID, ParentSpanID string
	Name                          string
	Kind                          tracepb.Span_SpanKind
	Attrs                         map[string]string
	Links                         []Link
	Events                        []string // names
	Resource                      map[string]string
	Scope                         string
	Flags                         uint32
	Status                        tracepb.Status_StatusCode
	Start, End                    time.Time
}

// Link is a received span link.
type Link struct{ TraceID, SpanID string }

// Receiver is the fake collector. Its zero value is not usable: New.
type Receiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	spans    []Span
	requests []Request
	faults   []int // statuses to answer next, in order
	retryAft string
	changed  chan struct{}
	// countOnly: spans are counted by name, not decoded (NewCounter).
	countOnly bool
	counts    map[string]int
}

// Request is what one export carried besides its spans.
type Request struct {
	ContentType, ContentEncoding string
	Headers                      http.Header
}

// New starts a receiver on loopback; Close stops it.
func New() *Receiver {
	r := &Receiver{changed: make(chan struct{}), counts: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// NewCounter starts a receiver that only counts the spans it receives by
// name (Counts), reading the protobuf without decoding it into spans: a
// sink for benchmarks, whose cost is the sender's, not a collector's.
func NewCounter() *Receiver {
	r := New()
	r.countOnly = true
	return r
}

// Counts is how many spans of each name were received (NewCounter).
func (r *Receiver) Counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.counts))
	for k, v := range r.counts {
		out[k] = v
	}
	return out
}

// Endpoint is the receiver's base URL (OTEL_EXPORTER_OTLP_ENDPOINT).
func (r *Receiver) Endpoint() string { return r.srv.URL }

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Close() }

// FailNext answers the next exports with these statuses (e.g. 503) and
// Retry-After retryAfter ("" = none), then accepts again.
func (r *Receiver) FailNext(retryAfter string, statuses ...int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, statuses...)
	r.retryAft = retryAfter
}

// Spans is every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests is every export received so far, refused ones included.
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.requests...)
}

// WaitFor waits until ok holds of the spans received, or timeout; it
// returns the spans and whether ok held.
func (r *Receiver) WaitFor(timeout time.Duration, ok func([]Span) bool) ([]Span, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		spans, ch := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if ok(spans) {
			return spans, true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return spans, false
		}
	}
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	r.mu.Lock()
	r.requests = append(r.requests, Request{ContentType: req.Header.Get("Content-Type"),
		ContentEncoding: req.Header.Get("Content-Encoding"), Headers: req.Header.Clone()})
	if len(r.faults) > 0 {
		code := r.faults[0]
		r.faults = r.faults[1:]
		if r.retryAft != "" {
			w.Header().Set("Retry-After", r.retryAft)
		}
		r.mu.Unlock()
		w.WriteHeader(code)
		return
	}
	r.mu.Unlock()
	if req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader
	body = io.LimitReader(req.Body, maxBody)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = io.LimitReader(zr, maxBody)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.countOnly {
		names, err := spanNames(b)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, n := range names {
			r.counts[n]++
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	}
	spans, err := Decode(b)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.spans = append(r.spans, spans...)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK)
}

// Decode reads an ExportTraceServiceRequest (field 1: repeated
// ResourceSpans) into spans.
func Decode(b []byte) ([]Span, error) {
	var out []Span
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return nil, protowire.ParseError(m)
			}
			b = b[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b)
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		b = b[m:]
		var rs tracepb.ResourceSpans
		if err := proto.Unmarshal(v, &rs); err != nil {
			return nil, fmt.Errorf("resource spans: %w", err)
		}
		res := kvs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()), Name: s.GetName(), Kind: s.GetKind(),
					Attrs: kvs(s.GetAttributes()), Resource: res, Status: s.GetStatus().GetCode(),
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano()))}
				sp.Scope, sp.Flags = ss.GetScope().GetName(), s.GetFlags()
				for _, ev := range s.GetEvents() {
					sp.Events = append(sp.Events, ev.GetName())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
				}
				out = append(out, sp)
			}
		}
	}
	return out, nil
}

func kvs(in []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(in))
	for _, kv := range in {
		m[kv.GetKey()] = str(kv.GetValue())
	}
	return m
}

func str(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_ArrayValue:
		s := "["
		for i, e := range x.ArrayValue.GetValues() {
			if i > 0 {
				s += ","
			}
			s += str(e)
		}
		return s + "]"
	}
	return ""
}

// spanNames walks an ExportTraceServiceRequest's wire format to the name
// (field 5) of each span: resource_spans (1) → scope_spans (2) → spans (2).
func spanNames(b []byte) ([]string, error) {
	var names []string
	err := fields(b, 1, func(rs []byte) error {
		return fields(rs, 2, func(ss []byte) error {
			return fields(ss, 2, func(sp []byte) error {
				return fields(sp, 5, func(name []byte) error {
					names = append(names, string(name))
					return nil
				})
			})
		})
	})
	return names, err
}

// fields calls f with the bytes of each length-delimited field num of b.
func fields(b []byte, num protowire.Number, f func([]byte) error) error {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if err := f(v); err != nil {
				return err
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
	}
	return nil
}
