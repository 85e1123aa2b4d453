package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/otlpfake"
)

func TestParseTraceparent(t *testing.T) {
	for _, tc := range []struct {
		in      string
		ok      bool
		sampled bool
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true, true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true, false},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true, true}, // a later version's extra field
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false, false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false, false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", false, false},
		{"not a traceparent", false, false},
		{"", false, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			sc, ok := tracing.ParseTraceparent(tc.in)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if ok && sc.IsSampled() != tc.sampled {
				t.Errorf("sampled = %v, want %v", sc.IsSampled(), tc.sampled)
			}
			if ok && !sc.IsRemote() {
				t.Error("a parsed parent must be remote")
			}
		})
	}
}

func TestExtract(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name                 string
		tp, ts, xray         string
		trace, span          string
		malformed, tracestat bool
	}{
		{name: "none"},
		{name: "traceparent", tp: tp, trace: "4bf92f3577b34da6a3ce929d0e0e4736", span: "00f067aa0ba902b7"},
		{name: "traceparent with tracestate", tp: tp, ts: "vendor=abc", trace: "4bf92f3577b34da6a3ce929d0e0e4736", span: "00f067aa0ba902b7", tracestat: true},
		{name: "traceparent wins over xray", tp: tp, xray: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
			trace: "4bf92f3577b34da6a3ce929d0e0e4736", span: "00f067aa0ba902b7"},
		{name: "malformed traceparent", tp: "00-zz", malformed: true},
		{name: "xray", xray: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
			trace: "5759e988bd862e3fe1be46a994272793", span: "53995c3f42cd8ad8"},
		{name: "xray fields in any order", xray: "Sampled=0;Parent=53995c3f42cd8ad8;Root=1-5759e988-bd862e3fe1be46a994272793",
			trace: "5759e988bd862e3fe1be46a994272793", span: "53995c3f42cd8ad8"},
		{name: "xray root without parent", xray: "Root=1-5759e988-bd862e3fe1be46a994272793"},
		{name: "xray malformed root", xray: "Root=2-5759e988-bd86;Parent=53995c3f42cd8ad8", malformed: true},
		{name: "xray malformed parent", xray: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=xyz", malformed: true},
		{name: "xray without root", xray: "Self=1-abc", malformed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tracing.Extract(tc.tp, tc.ts, tc.xray)
			if p.Malformed != tc.malformed {
				t.Fatalf("malformed = %v, want %v", p.Malformed, tc.malformed)
			}
			if tc.trace == "" {
				if p.SC.IsValid() {
					t.Fatalf("got a parent %v, want none", p.SC)
				}
				return
			}
			if got := p.SC.TraceID().String(); got != tc.trace {
				t.Errorf("trace id = %s, want %s", got, tc.trace)
			}
			if got := p.SC.SpanID().String(); got != tc.span {
				t.Errorf("span id = %s, want %s", got, tc.span)
			}
			if got := p.SC.TraceState().String() != ""; got != tc.tracestat {
				t.Errorf("tracestate kept = %v, want %v", got, tc.tracestat)
			}
		})
	}
}

func TestInjectRoundTrip(t *testing.T) {
	sc, _ := tracing.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ts, _ := trace.ParseTraceState("vendor=abc")
	ctx := trace.ContextWithSpanContext(context.Background(), sc.WithTraceState(ts))
	got := map[string]string{}
	tracing.Inject(ctx, func(k, v string) { got[k] = v })
	if got[tracing.AttrTraceparent] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || got[tracing.AttrTracestate] != "vendor=abc" {
		t.Errorf("injected %v", got)
	}
	none := map[string]string{}
	tracing.Inject(context.Background(), func(k, v string) { none[k] = v })
	if len(none) != 0 {
		t.Errorf("injected %v without a span context", none)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    tracing.Config
		key  string // "" = valid
	}{
		{name: "defaults", c: tracing.DefaultConfig()},
		{name: "https", c: with(func(c *tracing.Config) { c.Endpoint = "https://collector.example:4318" })},
		{name: "http loopback", c: with(func(c *tracing.Config) { c.Endpoint = "http://127.0.0.1:4318" })},
		{name: "http remote", c: with(func(c *tracing.Config) { c.Endpoint = "http://collector:4318" }), key: "endpoint"},
		{name: "http remote allowed", c: with(func(c *tracing.Config) { c.Endpoint = "http://collector:4318"; c.AllowHTTP = true })},
		{name: "metadata", c: with(func(c *tracing.Config) { c.Endpoint = "https://169.254.169.254/" }), key: "endpoint"},
		{name: "link-local", c: with(func(c *tracing.Config) { c.Endpoint = "https://169.254.1.2:4318" }), key: "endpoint"},
		{name: "userinfo", c: with(func(c *tracing.Config) { c.Endpoint = "https://u:p@collector:4318" }), key: "endpoint"},
		{name: "ratio", c: with(func(c *tracing.Config) { c.SamplerRatio = 1.5 }), key: "sampler_ratio"},
		{name: "compression", c: with(func(c *tracing.Config) { c.Compression = "zstd" }), key: "compression"},
		{name: "link without id", c: with(func(c *tracing.Config) { c.LinkTemplate = "https://tempo/x" }), key: "link_template"},
		{name: "link", c: with(func(c *tracing.Config) { c.LinkTemplate = "https://tempo/trace/{trace_id}" })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.key == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.key+":") {
				t.Fatalf("Validate = %v, want an error on %s", err, tc.key)
			}
		})
	}
}

func with(f func(*tracing.Config)) tracing.Config {
	c := tracing.DefaultConfig()
	f(&c)
	return c
}

func TestResolve(t *testing.T) {
	secret := func(ref string) (string, bool) {
		if ref == "arn:secret" {
			return "x-api-key=s3cr%20t,x-team=ops", true
		}
		return "", false
	}
	for _, tc := range []struct {
		name    string
		c       tracing.Config
		env     map[string]string
		on      bool
		url     string
		ratio   float64
		errKey  string
		headers map[string]string
	}{
		{name: "off by default", c: tracing.DefaultConfig(), ratio: 1},
		{name: "endpoint from the file", c: with(func(c *tracing.Config) { c.Endpoint = "https://otel:4318/" }), on: true,
			url: "https://otel:4318/v1/traces", ratio: 1},
		{name: "endpoint from the environment", c: tracing.DefaultConfig(), env: map[string]string{tracing.EnvEndpoint: "https://otel:4318"},
			on: true, url: "https://otel:4318/v1/traces", ratio: 1},
		{name: "traces endpoint used as it is", c: tracing.DefaultConfig(),
			env: map[string]string{tracing.EnvEndpoint: "https://a:4318", tracing.EnvTracesEndpoint: "https://b:4318/custom"},
			on:  true, url: "https://b:4318/custom", ratio: 1},
		{name: "disabled", c: with(func(c *tracing.Config) { c.Endpoint = "https://otel:4318" }),
			env: map[string]string{tracing.EnvSDKDisabled: "true"}, url: "https://otel:4318/v1/traces", ratio: 1},
		{name: "sampler", c: with(func(c *tracing.Config) { c.Endpoint = "https://otel:4318" }),
			env: map[string]string{tracing.EnvSampler: "parentbased_traceidratio", tracing.EnvSamplerArg: "0.25"},
			on:  true, url: "https://otel:4318/v1/traces", ratio: 0.25},
		{name: "bad sampler arg", c: tracing.DefaultConfig(), env: map[string]string{tracing.EnvSampler: "traceidratio", tracing.EnvSamplerArg: "2"},
			ratio: 1, errKey: tracing.EnvSamplerArg},
		{name: "metadata from the environment", c: tracing.DefaultConfig(), env: map[string]string{tracing.EnvEndpoint: "http://169.254.169.254"},
			on: true, url: "http://169.254.169.254/v1/traces", ratio: 1, errKey: tracing.EnvEndpoint},
		{name: "headers", c: with(func(c *tracing.Config) { c.Endpoint = "https://otel:4318"; c.HeadersSecret = "arn:secret" }),
			env: map[string]string{tracing.EnvHeaders: "x-team=sre"}, on: true, url: "https://otel:4318/v1/traces", ratio: 1,
			headers: map[string]string{"x-api-key": "s3cr t", "x-team": "sre"}},
		{name: "unreadable headers secret", c: with(func(c *tracing.Config) { c.Endpoint = "https://otel:4318"; c.HeadersSecret = "arn:other" }),
			on: true, url: "https://otel:4318/v1/traces", ratio: 1, errKey: "tracing.headers_secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			s, err := tracing.Resolve(tc.c, getenv, secret)
			switch {
			case tc.errKey == "" && err != nil:
				t.Fatalf("Resolve: %v", err)
			case tc.errKey != "" && (err == nil || !strings.Contains(err.Error(), tc.errKey+":")):
				t.Fatalf("Resolve = %v, want an error on %s", err, tc.errKey)
			}
			if err != nil && strings.Contains(err.Error(), "s3cr") {
				t.Errorf("an error quotes a header value: %v", err)
			}
			if s.On != tc.on || s.TracesURL != tc.url || s.SamplerRatio != tc.ratio {
				t.Errorf("on=%v url=%q ratio=%g, want %v %q %g", s.On, s.TracesURL, s.SamplerRatio, tc.on, tc.url, tc.ratio)
			}
			for k, v := range tc.headers {
				if s.Headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, s.Headers[k], v)
				}
			}
		})
	}
}

// exportOne ends a parent and a child span through exp on a provider of
// their own and returns the export's error.
func exportOne(t *testing.T, exp sdktrace.SpanExporter) error {
	t.Helper()
	var got error
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(errProcessor{exp: exp, err: &got}))
	tr := tp.Tracer("test")
	link, _ := tracing.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx, parent := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), link), "process q",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(trace.Link{SpanContext: link}),
		trace.WithAttributes(attribute.String("messaging.system", "aws_sqs"), attribute.Int("n", 3), attribute.Bool("b", true),
			attribute.Bool("f", false), attribute.Float64("x", 0.5), attribute.StringSlice("reasons", []string{"stop"}),
			attribute.Int64Slice("codes", []int64{1, -2})))
	parent.AddEvent("retry")
	parent.SetStatus(codes.Error, "failed")
	_, child := tr.Start(ctx, "run df", trace.WithSpanKind(trace.SpanKindInternal))
	child.End()
	parent.End()
	return got
}

// errProcessor exports each span at its end, synchronously, keeping the
// last error.
type errProcessor struct {
	exp sdktrace.SpanExporter
	err *error
}

func (p errProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p errProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if err := p.exp.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{s}); err != nil {
		*p.err = err
	}
}
func (p errProcessor) Shutdown(context.Context) error   { return nil }
func (p errProcessor) ForceFlush(context.Context) error { return nil }

func TestExporter(t *testing.T) {
	rcv := otlpfake.New()
	defer rcv.Close()
	reg := prometheus.NewRegistry()
	m := tracing.NewMetrics(reg)
	exp := tracing.NewExporter(tracing.ExporterOptions{URL: rcv.Endpoint() + "/v1/traces", Gzip: true, Timeout: 5 * time.Second,
		Headers: map[string]string{"X-Api-Key": "k"}, Resource: []attribute.KeyValue{attribute.String("service.name", "autodiag")}, Metrics: m})
	// Retry-After 0: retried at once, twice.
	rcv.FailNext("0", http.StatusServiceUnavailable, http.StatusTooManyRequests)
	if err := exportOne(t, exp); err != nil {
		t.Fatalf("export: %v", err)
	}
	spans := rcv.Spans()
	if len(spans) != 2 {
		t.Fatalf("received %d spans, want 2", len(spans))
	}
	child, parent := spans[0], spans[1]
	if child.Name != "run df" || parent.Name != "process q" || parent.Kind != tracepb.Span_SPAN_KIND_CONSUMER ||
		child.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Errorf("spans %q/%v %q/%v", child.Name, child.Kind, parent.Name, parent.Kind)
	}
	if child.TraceID != parent.TraceID || child.ParentSpanID != parent.SpanID || parent.ParentSpanID != "00f067aa0ba902b7" || parent.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("child %s/%s parent %s, want a child of %s/%s", child.TraceID, child.ParentSpanID, child.SpanID, parent.TraceID, parent.SpanID)
	}
	if parent.Attrs["messaging.system"] != "aws_sqs" || parent.Attrs["n"] != "3" || parent.Attrs["b"] != "true" || parent.Attrs["f"] != "false" ||
		parent.Attrs["x"] != "0.5" || parent.Attrs["reasons"] != "[stop]" || parent.Attrs["codes"] != "[1,-2]" {
		t.Errorf("attributes %v", parent.Attrs)
	}
	if len(parent.Links) != 1 || parent.Links[0].SpanID != "00f067aa0ba902b7" || parent.Status != tracepb.Status_STATUS_CODE_ERROR ||
		len(parent.Events) != 1 || parent.Events[0] != "retry" || parent.Flags != 0x301 || child.Flags != 0x101 || child.Scope != "test" {
		t.Errorf("parent links %v status %v events %v flags %#x, child flags %#x scope %q", parent.Links, parent.Status, parent.Events,
			parent.Flags, child.Flags, child.Scope)
	}
	if !parent.End.After(parent.Start) && !parent.End.Equal(parent.Start) || parent.Start.IsZero() {
		t.Errorf("parent times %v–%v", parent.Start, parent.End)
	}
	if parent.Resource["service.name"] != "autodiag" {
		t.Errorf("resource %v", parent.Resource)
	}
	reqs := rcv.Requests()
	if len(reqs) != 4 { // 2 refused + 2 spans
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	last := reqs[len(reqs)-1]
	if last.ContentType != "application/x-protobuf" || last.ContentEncoding != "gzip" || last.Headers.Get("X-Api-Key") != "k" {
		t.Errorf("request %+v", last)
	}
	if got := testutil.ToFloat64(m.SpansExported); got != 2 {
		t.Errorf("exported = %g, want 2", got)
	}

	// A refusal that is not retryable drops the spans at once.
	rcv.FailNext("", http.StatusBadRequest, http.StatusBadRequest)
	if err := exportOne(t, exp); !errors.Is(err, tracing.ErrExport) {
		t.Fatalf("export after 400 = %v, want ErrExport", err)
	}
	// A Retry-After beyond what an export may wait ends it too.
	rcv.FailNext("3600", http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	if err := exportOne(t, exp); err == nil || !strings.Contains(err.Error(), "asks to wait") {
		t.Fatalf("export after a long Retry-After = %v", err)
	}
	if got := testutil.ToFloat64(m.SpansDropped); got != 4 {
		t.Errorf("dropped = %g, want 4", got)
	}
	if got := testutil.ToFloat64(m.ExportErrors); got != 4 {
		t.Errorf("export errors = %g, want 4", got)
	}
	if n := len(rcv.Spans()); n != 2 {
		t.Errorf("%d spans received in all, want 2", n)
	}
}

func TestMetricsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	tracing.NewMetrics(reg)
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 { // exported, dropped, errors, parent_invalid{sqs,http}
		t.Errorf("%d series at start, want 5", n)
	}
}

func TestLogHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(tracing.NewLogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "x")
	sc, _ := tracing.ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	log.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "task ended", "task_id", "t1")
	log.Info("no span")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first["trace_id"] != "4bf92f3577b34da6a3ce929d0e0e4736" || first["span_id"] != "00f067aa0ba902b7" || first["component"] != "x" {
		t.Errorf("traced line %v", first)
	}
	if _, ok := second["trace_id"]; ok {
		t.Errorf("untraced line %v has a trace_id", second)
	}
}

// With tracing off, an instrumented step costs no allocation.
func TestStartOffAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c, span := tracing.Start(ctx, "claim", trace.SpanKindInternal)
		span.End()
		_ = c
	})
	if allocs != 0 {
		t.Errorf("Start with tracing off allocates %g times", allocs)
	}
}

func TestLink(t *testing.T) {
	c := tracing.Config{LinkTemplate: "https://tempo.example/explore?trace={trace_id}"}
	if got := c.Link("abc"); got != "https://tempo.example/explore?trace=abc" {
		t.Errorf("Link = %q", got)
	}
	if got := c.Link(""); got != "" {
		t.Errorf("Link of no id = %q", got)
	}
}

// TestExporterFollowsNoRedirect: an endpoint answering with a redirect
// (to the receiver here; to the metadata service in an attack) gets no
// spans sent on: the export fails.
func TestExporterFollowsNoRedirect(t *testing.T) {
	rcv := otlpfake.New()
	defer rcv.Close()
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, rcv.Endpoint()+"/v1/traces", http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	exp := tracing.NewExporter(tracing.ExporterOptions{URL: redirect.URL + "/v1/traces", Timeout: 5 * time.Second})
	if err := exportOne(t, exp); !errors.Is(err, tracing.ErrExport) {
		t.Fatalf("export = %v, want ErrExport", err)
	}
	if n := len(rcv.Requests()); n != 0 {
		t.Errorf("the redirect was followed: the receiver got %d requests", n)
	}
}
