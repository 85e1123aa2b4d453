package report

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/internal/fake/openaifake"
	"github.com/autodiag/autodiag/limiter"
)

type sinkRec struct {
	mu  sync.Mutex
	got []Result
	ch  chan Result
}

func newSink() *sinkRec { return &sinkRec{ch: make(chan Result, 16)} }

func (s *sinkRec) Report(_ context.Context, _ Job, r Result) error {
	s.mu.Lock()
	s.got = append(s.got, r)
	s.mu.Unlock()
	s.ch <- r
	return nil
}

func (s *sinkRec) next(t *testing.T, within time.Duration) Result {
	t.Helper()
	select {
	case r := <-s.ch:
		return r
	case <-time.After(within):
		t.Fatalf("no report within %s", within)
		return Result{}
	}
}

type harness struct {
	fake *openaifake.Server
	r    *Reporter
	q    Queue
	sink *sinkRec
	reg  *prometheus.Registry
	run  chan error
}

func newHarness(t *testing.T, q Queue, mod func(*Options)) *harness {
	t.Helper()
	f, p := newOpenAIFake(t)
	cfg := testConfig()
	lim, err := limiter.New(cfg.LimiterConfig(false), limiter.NewMemory(), limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if q == nil {
		q = NewMemoryQueue(0, nil)
	}
	h := &harness{fake: f, q: q, sink: newSink(), reg: prometheus.NewRegistry(), run: make(chan error, 1)}
	o := Options{Config: cfg, Provider: p, Queue: q, Sink: h.sink, Limiter: lim, Redactor: testRedactor(t),
		Consumer: "i-test", Registerer: h.reg}
	if mod != nil {
		mod(&o)
	}
	h.r, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	go func() { h.run <- h.r.Run(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = h.r.Stop(ctx)
	})
	return h
}

func job(id string) Job { return Job{ID: id, Evidence: evidence()} }

// wait is the bound of a report against a prompt fake: one request on
// loopback, plus slack for the race detector.
const wait = 5 * time.Second

func TestReporterWritesReportThenRateLimits(t *testing.T) {
	h := newHarness(t, nil, nil)
	ctx := context.Background()
	if err := h.r.Enqueue(ctx, job("t1")); err != nil {
		t.Fatal(err)
	}
	if r := h.sink.next(t, wait); r.Status != StatusOK || r.Confidence != ConfidenceLikely || r.Provider != ProviderOpenAI {
		t.Fatalf("first report %+v", r)
	}
	if err := h.r.Enqueue(ctx, job("t2")); err != nil {
		t.Fatal(err)
	}
	r := h.sink.next(t, wait)
	if r.Status != StatusRateLimited || !strings.Contains(r.Reason, "min_interval") {
		t.Fatalf("second report %+v", r)
	}
	if n := len(h.fake.Requests()); n != 1 {
		t.Fatalf("the provider got %d requests, want 1 (a rate_limited report sends nothing)", n)
	}
	if got := testutil.ToFloat64(h.r.m.reports.WithLabelValues(ProviderOpenAI, StatusOK)); got != 1 {
		t.Fatalf("reports_total ok = %g", got)
	}
	if got := testutil.ToFloat64(h.r.m.reports.WithLabelValues(ProviderOpenAI, StatusRateLimited)); got != 1 {
		t.Fatalf("reports_total rate_limited = %g", got)
	}
	if got := testutil.ToFloat64(h.r.m.tokens.WithLabelValues(ProviderOpenAI, "input")); got == 0 {
		t.Fatal("no input tokens counted")
	}
	waitLen(t, h.q, 0)
	if problems, err := testutil.GatherAndLint(h.reg); err != nil || len(problems) > 0 {
		t.Fatalf("promlint: %v %v", problems, err)
	}
}

func TestReporterForceSkipsCooldownNotDailyCap(t *testing.T) {
	cfg := testConfig()
	cfg.Limits = []limiter.Limit{{MinInterval: time.Hour}, {Daily: 2}}
	mem := limiter.NewMemory()
	lim, _ := limiter.New(cfg.LimiterConfig(false), mem, limiter.Options{})
	force, _ := limiter.New(cfg.LimiterConfig(true), mem, limiter.Options{})
	h := newHarness(t, nil, func(o *Options) { o.Config = cfg; o.Limiter = lim; o.ForceLimiter = force })
	ctx := context.Background()
	want := []string{StatusOK, StatusOK, StatusRateLimited}
	for i, w := range want {
		j := job("t")
		j.Force = i > 0
		if err := h.r.Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
		if r := h.sink.next(t, wait); r.Status != w {
			t.Fatalf("report %d: %s (%s), want %s", i, r.Status, r.Reason, w)
		}
	}
}

func TestReporterSkipsOldJobs(t *testing.T) {
	h := newHarness(t, nil, nil)
	j := job("old")
	j.EnqueuedAt = time.Now().Add(-2 * testConfig().MaxAge)
	if err := h.r.Enqueue(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if r := h.sink.next(t, wait); r.Status != StatusSkipped || !strings.Contains(r.Reason, "max_age") {
		t.Fatalf("report %+v", r)
	}
	if len(h.fake.Requests()) != 0 {
		t.Fatal("a skipped report reached the provider")
	}
}

func TestReporterProviderFailureEndsFailed(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.fake.Always(openaifake.Garbage)
	if err := h.r.Enqueue(context.Background(), job("t1")); err != nil {
		t.Fatal(err)
	}
	if r := h.sink.next(t, wait); r.Status != StatusFailed || r.Reason == "" {
		t.Fatalf("report %+v", r)
	}
	if got := testutil.ToFloat64(h.r.m.reports.WithLabelValues(ProviderOpenAI, StatusFailed)); got != 1 {
		t.Fatalf("reports_total failed = %g", got)
	}
}

// TestSecretNeverReachesProvider: the output is redacted before it is
// queued (the agent's chokepoint), and Enqueue keeps it that way.
func TestSecretNeverReachesProvider(t *testing.T) {
	h := newHarness(t, nil, nil)
	const secret = "AKIAIOSFODNN7EXAMPLE"
	j := job("t1")
	j.Evidence.Output = testRedactor(t).RedactString("export AWS_ACCESS_KEY_ID=" + secret + "\nerror: denied\n")
	if err := h.r.Enqueue(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	h.sink.next(t, wait)
	reqs := h.fake.Requests()
	if len(reqs) != 1 || strings.Contains(string(reqs[0].Body), secret) || !strings.Contains(string(reqs[0].Body), "REDACTED") {
		t.Fatalf("request body: %s", reqs[0].Body)
	}
}

func TestReporterStopAtDeadlineLeavesJobQueued(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.fake.SetLatency(time.Hour)
	ctx := context.Background()
	if err := h.r.Enqueue(ctx, job("t1")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for len(h.fake.Requests()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the report never started")
		}
		time.Sleep(5 * time.Millisecond) // polling an observable condition
	}
	const grace = 200 * time.Millisecond
	sctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	start := time.Now()
	if err := h.r.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v", err)
	}
	// The deadline plus room for a loaded 2-core runner with -race; a Stop
	// waiting on the model would take its hour.
	if el := time.Since(start); el > grace+10*time.Second {
		t.Fatalf("Stop took %s with a %s deadline", el, grace)
	}
	if err := <-h.run; err != nil {
		t.Fatal(err)
	}
	if n, _ := h.q.Len(ctx); n != 1 {
		t.Fatalf("%d jobs queued, want the stopped one left for another agent", n)
	}
	select {
	case r := <-h.sink.ch:
		t.Fatalf("a stopped report was written: %+v", r)
	default:
	}
}

func TestReporterDrainedTakesNothing(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.r.Drain()
	if err := <-h.run; err != nil {
		t.Fatal(err)
	}
	if err := h.r.Enqueue(context.Background(), job("t1")); err != nil {
		t.Fatal(err)
	}
	if n, _ := h.q.Len(context.Background()); n != 1 || len(h.fake.Requests()) != 0 {
		t.Fatalf("queued %d, requests %d", n, len(h.fake.Requests()))
	}
	if err := h.r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestEnqueueCutsOutput(t *testing.T) {
	q := NewMemoryQueue(0, nil)
	h := newHarness(t, q, nil)
	h.r.Drain()
	if err := <-h.run; err != nil {
		t.Fatal(err)
	}
	j := job("t1")
	j.Evidence.Output = strings.Repeat("x\n", 1000)
	if err := h.r.Enqueue(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	c, ok, _ := q.Claim(context.Background(), "c")
	if !ok || strings.Count(c.Evidence.Output, "\n") != testConfig().Input.MaxLines {
		t.Fatalf("queued output has %d lines", strings.Count(c.Evidence.Output, "\n"))
	}
}

// waitLen waits for the queue to hold n jobs: a worker acknowledges a job
// right after its Sink returned.
func waitLen(t *testing.T, q Queue, n int64) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got, err := q.Len(context.Background())
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d jobs (err %v), want %d", got, err, n)
		}
		time.Sleep(5 * time.Millisecond) // polling an observable condition
	}
}
