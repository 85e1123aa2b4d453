package report

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/limiter"
)

// Sink receives every finished report: the program writes it into the
// task record (`report`) and emits the `report` notification event.
type Sink interface {
	Report(ctx context.Context, j Job, r Result) error
}

// SinkFunc is a Sink of one function.
type SinkFunc func(ctx context.Context, j Job, r Result) error

// Report implements Sink.
func (f SinkFunc) Report(ctx context.Context, j Job, r Result) error { return f(ctx, j, r) }

// Limiter is what reports use of *limiter.Limiter.
type Limiter interface {
	Allow(ctx context.Context, r limiter.Request) (limiter.Decision, error)
}

// Options are a Reporter's parts; Provider, Queue and Sink are required.
type Options struct {
	Config   Config
	Provider Provider
	Queue    Queue
	Sink     Sink
	// Limiter decides before anything is sent: a limiter.New of
	// Config.LimiterConfig(false). Nil: no limit.
	Limiter Limiter
	// ForceLimiter decides for jobs with Force: a limiter.New of
	// Config.LimiterConfig(true) on the same backend. Nil: Limiter.
	ForceLimiter Limiter
	// Redactor redacts the model's answer; nil leaves it as it is.
	Redactor Redactor
	// Consumer names this agent in the queue (the instance id).
	Consumer string
	Clock    clock.Clock  // nil: the wall clock
	Logger   *slog.Logger // nil: discard
	// Registerer gets the report metrics; nil: not registered.
	Registerer prometheus.Registerer
	// PollInterval is how often an idle worker looks for jobs other
	// agents queued; a job queued through this Reporter is taken at
	// once. 0: DefaultPollInterval.
	PollInterval time.Duration
	// SinkTimeout bounds one Sink call. 0: DefaultSinkTimeout.
	SinkTimeout time.Duration
	// Writer writes the report of a job the limiter allowed; nil: the
	// single-shot Generator. An investigation is another Writer.
	Writer Writer
}

// Writer writes one report; it never fails, a failure is a Result.
type Writer interface {
	Generate(ctx context.Context, ev Evidence) Result
}

// Defaults of Options.
const (
	DefaultPollInterval = time.Second
	DefaultSinkTimeout  = 5 * time.Second
)

// Reporter runs report jobs on Config.Workers workers of its own.
type Reporter struct {
	o        Options
	gen      Writer
	log      *slog.Logger
	m        *metrics
	kick     chan struct{}
	draining chan struct{}
	drainOne sync.Once
	started  atomic.Bool
	done     chan struct{}
	// work is the context of reports in progress: not the Run context
	// (a stopping agent lets them finish) but cancelled by Stop's
	// deadline.
	work       context.Context
	cancelWork context.CancelFunc
}

// New returns a Reporter; Run starts its workers.
func New(o Options) (*Reporter, error) {
	if o.Provider == nil || o.Queue == nil || o.Sink == nil {
		return nil, errors.New("report: Provider, Queue and Sink are required")
	}
	if o.Config.Workers <= 0 {
		return nil, fmt.Errorf("report: workers must be positive, got %d", o.Config.Workers)
	}
	if o.ForceLimiter == nil {
		o.ForceLimiter = o.Limiter
	}
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.SinkTimeout <= 0 {
		o.SinkTimeout = DefaultSinkTimeout
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	m.init(o.Provider.Name())
	work, cancel := context.WithCancel(context.Background())
	var gen Writer = NewGenerator(o.Config, o.Provider, o.Redactor, o.Clock)
	if o.Writer != nil {
		gen = o.Writer
	}
	return &Reporter{
		o: o, gen: gen,
		log: o.Logger.With("component", "report", "provider", o.Provider.Name()), m: m,
		kick: make(chan struct{}, 1), draining: make(chan struct{}), done: make(chan struct{}),
		work: work, cancelWork: cancel,
	}, nil
}

// Enqueue queues the report of a finished task in one round trip. It
// sets EnqueuedAt when zero and cuts the output to the prompt's input
// bounds, so the queue holds no more than a prompt needs.
func (r *Reporter) Enqueue(ctx context.Context, j Job) error {
	if err := r.o.Queue.Enqueue(ctx, r.Prepare(j)); err != nil {
		return err
	}
	r.Kick()
	return nil
}

// Prepare is j as Enqueue queues it: EnqueuedAt set, the output cut to
// report.input. A caller that queues the job itself (RedisQueue.AddArgs)
// uses it, then Kick.
func (r *Reporter) Prepare(j Job) Job {
	if j.EnqueuedAt.IsZero() {
		j.EnqueuedAt = r.o.Clock.Now().UTC()
	}
	if j.Evidence.Output != "" {
		j.Evidence.Output, _, _ = Tail(j.Evidence.Output, r.o.Config.Input.MaxLines, int(r.o.Config.Input.MaxBytes))
	}
	return j
}

// Kick tells the workers a job was queued, so an idle one looks at once.
func (r *Reporter) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run takes jobs until ctx ends or Drain is called, then waits for the
// reports in progress (bounded by Stop) and returns. ctx ending does not
// cancel a report in progress.
func (r *Reporter) Run(ctx context.Context) error {
	if r.started.Swap(true) {
		return errors.New("report: Run called twice")
	}
	defer close(r.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, r.o.Config.Workers)
	tick := time.NewTicker(r.o.PollInterval)
	defer tick.Stop()
	for {
		select {
		case slots <- struct{}{}:
		case <-r.draining:
			return nil
		case <-ctx.Done():
			return nil
		}
		if r.stopping(ctx) {
			return nil
		}
		r.shed(ctx)
		c, ok, err := r.o.Queue.Claim(ctx, r.o.Consumer)
		if !ok {
			<-slots
			if err != nil && ctx.Err() == nil {
				r.log.Warn("report: claim failed", "err", err)
			}
			select {
			case <-r.kick:
			case <-tick.C:
			case <-r.draining:
				return nil
			case <-ctx.Done():
				return nil
			}
			continue
		}
		wg.Add(1)
		go func() { //nolint:contextcheck // a report in progress outlives ctx: Stop bounds it
			defer wg.Done()
			defer func() { <-slots }()
			r.handle(c)
		}()
	}
}

func (r *Reporter) stopping(ctx context.Context) bool {
	select {
	case <-r.draining:
		return true
	default:
		return ctx.Err() != nil
	}
}

// Drain makes Run take no new job; jobs not taken stay queued for other
// agents.
func (r *Reporter) Drain() { r.drainOne.Do(func() { close(r.draining) }) }

// Stop drains and waits for the reports in progress until ctx ends (the
// drain deadline); then it cancels them, leaves their jobs queued for
// another agent, waits for Run to return and returns ctx.Err().
func (r *Reporter) Stop(ctx context.Context) error {
	r.Drain()
	if !r.started.Load() {
		r.cancelWork()
		return nil
	}
	select {
	case <-r.done:
		r.cancelWork()
		return nil
	case <-ctx.Done():
		r.cancelWork()
		<-r.done
		return ctx.Err()
	}
}

// MaxJobAttempts is how many times a report job may be claimed. A job
// claimed again was left by an agent that stopped (a drain deadline) or
// died while writing it; one that keeps taking agents down with it must
// not be retaken for ever, so past this it ends failed, dead-lettered.
const MaxJobAttempts = 3

// Reasons a report job is dead-lettered: ended failed, its reason written
// to the task's record, counted in autodiag_report_jobs_dead_lettered_total
// and logged at error, and never claimed again.
const (
	// DeadPanic: writing the report panicked; the agent recovers, and
	// the same job would panic again on whichever agent took it.
	DeadPanic = "panic"
	// DeadMaxAttempts: claimed MaxJobAttempts times without finishing.
	DeadMaxAttempts = "max_attempts"
	// DeadNotStored: the report was written but its result could not be
	// stored in the task's record.
	DeadNotStored = "not_stored"
)

// DeadReasons lists every dead-letter reason, for metrics at 0.
var DeadReasons = []string{DeadPanic, DeadMaxAttempts, DeadNotStored}

// handle runs one claimed job to its end: written, or dead-lettered. A
// panic in the job is recovered here, so that one hostile answer cannot
// take the agent down, and then every agent that takes the job over.
func (r *Reporter) handle(c Claimed) {
	start := r.o.Clock.Now()
	tctx, span := tracing.Start(tracing.ContextWithRemote(r.work, c.TraceID, c.SpanID), "report", trace.SpanKindInternal,
		tracing.KeyTaskID.String(c.ID))
	defer span.End()
	log := r.log.With("task_id", c.ID, "host", c.Evidence.Host, "diagnostic", c.Evidence.Diagnostic)
	var res Result
	dead := ""
	if c.Attempt > MaxJobAttempts {
		res = r.base()
		res.Status = StatusFailed
		res.Reason = fmt.Sprintf("%s: the report job was claimed %d times and never finished (the agents writing it stopped or crashed), so it is not tried again",
			DeadMaxAttempts, c.Attempt)
		dead = DeadMaxAttempts
	} else {
		res, dead = r.processRecovered(tctx, c.Job, log)
		traceReport(span, res)
		if dead == "" && r.work.Err() != nil && res.Status == StatusFailed {
			// Stopped at the drain deadline: another agent writes it.
			log.Info("report: stopped at the drain deadline; left queued", "duration_s", r.o.Clock.Now().Sub(start).Seconds())
			return
		}
	}
	stored := r.record(r.work, log, c.Job, res)
	actx, cancel := context.WithTimeout(context.WithoutCancel(r.work), r.o.SinkTimeout)
	err := r.o.Queue.Ack(actx, c)
	cancel()
	if err != nil && !errors.Is(err, ErrGone) {
		log.Warn("report: ack failed; another agent may write it again", "err", err)
	}
	if !stored && dead == "" {
		dead = DeadNotStored
	}
	attrs := []any{"status", res.Status, "attempt", c.Attempt, "latency_s", res.LatencyS,
		"input_tokens", res.InputTokens, "output_tokens", res.OutputTokens}
	if g := res.Grounding; g != nil {
		attrs = append(attrs, "citations_cited", g.Cited, "citations_verified", g.Verified)
	}
	if res.Answer != nil {
		attrs = append(attrs, "category", res.Answer.Category)
	}
	switch {
	case dead != "":
		r.m.dead.WithLabelValues(r.o.Provider.Name(), dead).Inc()
		log.ErrorContext(tctx, "report: dead-lettered", append(attrs, "dead_reason", dead, "reason", res.Reason)...)
	case res.Status == StatusOK:
		log.InfoContext(tctx, "report: written", append(attrs, "confidence", res.Confidence, "unstructured", res.Unstructured)...)
	default:
		log.WarnContext(tctx, "report: not written", append(attrs, "reason", res.Reason)...)
	}
}

// base is a Result of this reporter's provider and model, created now.
func (r *Reporter) base() Result {
	return Result{Provider: r.o.Provider.Name(), Model: r.o.Config.Model, CreatedAt: r.o.Clock.Now().UTC()}
}

// processRecovered is Process, with a panic turned into a failed Result
// whose reason names it, and dead DeadPanic.
func (r *Reporter) processRecovered(ctx context.Context, j Job, log *slog.Logger) (res Result, dead string) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("report: panicked writing the report", "err", fmt.Sprint(v), "stack", string(debug.Stack()))
			res = r.base()
			res.Status = StatusFailed
			res.Reason = fmt.Sprintf("%s: writing the report panicked: %v", DeadPanic, v)
			dead = DeadPanic
		}
	}()
	return r.Process(ctx, j), ""
}

// record counts res and hands it to the Sink, within SinkTimeout even
// when ctx has ended; stored says whether the Sink took it. A panic in
// either is recovered: the job still ends.
func (r *Reporter) record(ctx context.Context, log *slog.Logger, j Job, res Result) (stored bool) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("report: panicked recording the result", "err", fmt.Sprint(v), "stack", string(debug.Stack()))
			stored = false
		}
	}()
	res.finite()
	r.m.observe(r.o.Provider.Name(), res)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.o.SinkTimeout)
	err := r.o.Sink.Report(sctx, j, res)
	cancel()
	if err != nil {
		log.Error("report: writing the result failed", "err", err)
		return false
	}
	return true
}

// shedBatch bounds the jobs one shed ends.
const shedBatch = 100

// ReasonQueueFull is the reason of a job that the queue's cap ended
// `skipped` before any agent took it.
const ReasonQueueFull = "report queue full: the oldest jobs past its cap are skipped"

// shed ends `skipped` (counted, logged, written to the task's record) the
// oldest jobs past the queue's cap, when the Queue has one (Shedder).
func (r *Reporter) shed(ctx context.Context) {
	s, ok := r.o.Queue.(Shedder)
	if !ok {
		return
	}
	jobs, err := s.Shed(ctx, shedBatch)
	if err != nil && ctx.Err() == nil {
		r.log.Error("report: shedding past the queue's cap", "err", err)
	}
	for _, j := range jobs {
		res := r.base()
		res.Status, res.Reason = StatusSkipped, ReasonQueueFull
		log := r.log.With("task_id", j.ID, "host", j.Evidence.Host, "diagnostic", j.Evidence.Diagnostic)
		_ = r.record(ctx, log, j, res)
		log.Warn("report: not written", "status", res.Status, "reason", res.Reason)
	}
}

// Process writes the report of j now: skipped when it waited longer
// than max_age, rate_limited when the limiter denies it (nothing is
// sent), else what the provider answered. It is what a worker does with a
// job, and what `autodiag report ID` calls directly (then with Force).
func (r *Reporter) Process(ctx context.Context, j Job) Result {
	now := r.o.Clock.Now()
	base := Result{Provider: r.o.Provider.Name(), Model: r.o.Config.Model, CreatedAt: now.UTC()}
	if age := now.Sub(j.EnqueuedAt); !j.EnqueuedAt.IsZero() && age > r.o.Config.MaxAge {
		base.Status = StatusSkipped
		base.Reason = fmt.Sprintf("queued for %.0fs, longer than max_age %gs", age.Seconds(), r.o.Config.MaxAge.Seconds())
		return base
	}
	lim := r.o.Limiter
	if j.Force {
		lim = r.o.ForceLimiter
	}
	if lim != nil {
		d, err := lim.Allow(ctx, limiter.Request{Host: j.Evidence.Host, Diagnostic: j.Evidence.Diagnostic,
			Severity: j.Evidence.Alert.Severity, TaskID: j.ID})
		if err != nil {
			base.Status = StatusFailed
			base.Reason = fmt.Sprintf("limiter: %v", err)
			return base
		}
		if !d.Allowed {
			base.Status = StatusRateLimited
			what := d.Reason
			if d.Limit != "" && d.Limit != d.Reason {
				what = d.Limit + " " + d.Reason
			}
			base.Reason = fmt.Sprintf("limiter rule %s: %s, retry after %.0fs", d.Rule, what, d.RetryAfter.Seconds())
			return base
		}
	}
	return r.gen.Generate(ctx, j.Evidence)
}
