package hooks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/investigate"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// ReportParts are what root-cause reports need from outside the agent:
// the model endpoint, the job queue and the limiter backend of the report
// rule. OpenReportParts builds them from the config.
type ReportParts struct {
	// Writer writes each report; nil: the single-shot report, or the
	// investigation the hooks build when report.investigate is set.
	Writer report.Writer
	// Budget is the investigations' daily budget, in Redis when
	// configured; nil: in memory.
	Budget   investigate.Budget
	Provider report.Provider
	Queue    report.Queue
	Backend  limiter.Backend
	// Runbooks are report.runbooks with their files read (OpenReportParts
	// reads them); nil: none.
	Runbooks *report.Runbooks
}

// OpenReportParts builds the report provider (Bedrock with awsCfg, or an
// OpenAI-compatible server with the key lookupEnv reads), the queue and
// the limiter backend: in Redis when rc is set (a fleet shares the jobs
// and the limits), else in memory.
func OpenReportParts(cfg config.Config, awsCfg aws.Config, rc redis.UniversalClient, lookupEnv func(string) (string, bool)) (*ReportParts, error) {
	rcfg := cfg.Report
	var parts ReportParts
	switch rcfg.Provider {
	case report.ProviderBedrock:
		parts.Provider = report.NewBedrock(awsCfg, rcfg.Guardrail)
	case report.ProviderOpenAI:
		if lookupEnv == nil {
			lookupEnv = func(string) (string, bool) { return "", false }
		}
		key, _ := lookupEnv(cmp.Or(rcfg.APIKeySecret, rcfg.APIKeyEnv))
		var hc *http.Client
		if rcfg.APIKeySecret != "" {
			hc = &http.Client{Transport: liveKey{ref: rcfg.APIKeySecret, lookup: lookupEnv, next: http.DefaultTransport}}
		}
		parts.Provider = report.NewOpenAI(rcfg.BaseURL, key, hc)
	default:
		return nil, fmt.Errorf("hooks: report.provider %q: unknown", rcfg.Provider)
	}
	rbs, err := report.LoadRunbooks(rcfg.Runbooks, os.ReadFile)
	if err != nil {
		return nil, fmt.Errorf("hooks: %w", err)
	}
	parts.Runbooks = rbs
	if rc != nil {
		parts.Queue = report.NewRedisQueue(rc, cfg.Redis.Prefix, rcfg.JobLease())
		parts.Backend = limiter.NewRedis(rc, cfg.Redis.Prefix+"report:")
		if ic := rcfg.Investigate; ic != nil {
			parts.Budget = investigate.NewRedisBudget(rc, cfg.Redis.Prefix, ic.DailyTokens, ic.DailyCostUSD, nil)
		}
	} else {
		parts.Queue = report.NewMemoryQueue(rcfg.JobLease(), nil)
		parts.Backend = limiter.NewMemory()
	}
	return &parts, nil
}

// liveKey sends each request to the model with report.api_key_secret's
// value as last read, so a rotated key applies without a restart.
type liveKey struct {
	ref    string
	lookup func(string) (string, bool)
	next   http.RoundTripper
}

func (t liveKey) RoundTrip(req *http.Request) (*http.Response, error) {
	if v, ok := t.lookup(t.ref); ok && v != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+v)
	}
	return t.next.RoundTrip(req)
}

// NewReporter builds the Reporter of parts: the report rule's two
// limiters (cooldown and daily cap; with force only the cap) on parts'
// backend, the model's answer redacted by red, each result handed to
// sink. reg gets the report metrics (nil: none).
func NewReporter(cfg config.Config, parts *ReportParts, sink report.Sink, red report.Redactor, consumer string,
	reg prometheus.Registerer, log *slog.Logger) (*report.Reporter, error) {
	lopts := limiter.Options{Timeout: cfg.Redis.Timeout, Logger: log.With("component", "report")}
	lim, err := limiter.New(cfg.Report.LimiterConfig(false), parts.Backend, lopts)
	if err != nil {
		return nil, fmt.Errorf("hooks: report.limits: %w", err)
	}
	force, err := limiter.New(cfg.Report.LimiterConfig(true), parts.Backend, lopts)
	if err != nil {
		return nil, fmt.Errorf("hooks: report.limits: %w", err)
	}
	r, err := report.New(report.Options{Config: cfg.Report.Config, Provider: parts.Provider, Queue: parts.Queue, Sink: sink,
		Limiter: lim, ForceLimiter: force, Redactor: red, Consumer: consumer, Logger: log,
		Registerer: reg, SinkTimeout: max(cfg.Redis.Timeout, time.Second), Writer: parts.Writer})
	if err != nil {
		return nil, fmt.Errorf("hooks: report: %w", err)
	}
	return r, nil
}

// ReportSink writes each result into its task's record (SetReport) and
// then, with a notifier, enqueues the `report` event of that record.
func ReportSink(store state.TaskStore, n *notifier) report.SinkFunc { return reportSink(store, n, nil) }

// reportSink is ReportSink, each record whose report was written handed
// to written (nil: none) before its event.
func reportSink(store state.TaskStore, n *notifier, written func(ctx context.Context, rec state.TaskRecord) state.TaskRecord) report.SinkFunc {
	return func(ctx context.Context, j report.Job, r report.Result) error {
		js, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("report of %s: %w", j.ID, err)
		}
		ok, err := store.SetReport(ctx, j.ID, js)
		if err != nil {
			return fmt.Errorf("report of %s: %w", j.ID, err)
		}
		if !ok || n == nil && written == nil {
			return nil
		}
		rec, found, err := store.Task(ctx, j.ID)
		if err != nil || !found {
			return nil //nolint:nilerr // the report is stored; only its event is lost
		}
		if written != nil {
			rec = written(ctx, rec)
		}
		if n == nil {
			return nil
		}
		v := rec.View(tracing.Link)
		n.enqueue(notify.Event{Type: notify.EventReport, Task: &v}, "task_id", j.ID)
		return nil
	}
}

// OutboxReportSink is ReportSink for a process that delivers no
// notification itself (`autodiag report`): the `report` event is written
// to ob for each sink of cfg.Notify that wants it, and the fleet's agents
// deliver it, as they do every entry of the outbox. It reads no sink URL
// or secret: an entry names its sink, and the agent that claims it holds
// the rest. No sinks configured, or no ob: the record only. written (nil:
// none) is handed each record whose report was written, before its event
// (resolution.Recorder.ReportWritten: a report written after its alert
// resolved gets resolved_at).
func OutboxReportSink(cfg config.Config, store state.TaskStore, ob notify.Outbox, instanceID string, log *slog.Logger,
	written func(ctx context.Context, rec state.TaskRecord) state.TaskRecord) (report.SinkFunc, error) {
	if len(cfg.Notify) == 0 || ob == nil {
		return reportSink(store, nil, written), nil
	}
	n, err := outboxNotifier(cfg, ob, instanceID, log)
	if err != nil {
		return nil, err
	}
	return reportSink(store, n, written), nil
}

// outboxNotifier writes the events of cfg's sinks to ob for the agents to
// deliver; it never sends.
func outboxNotifier(cfg config.Config, ob notify.Outbox, instanceID string, log *slog.Logger) (*notifier, error) {
	sinks := make([]notify.Sink, len(cfg.Notify))
	for i, c := range cfg.Notify {
		sinks[i] = addressedSink{c}
	}
	d, err := notify.NewDispatcher(ob, sinks, notify.Options{InstanceID: instanceID, StoreTimeout: cfg.Redis.Timeout,
		Logger: log})
	if err != nil {
		return nil, fmt.Errorf("hooks: notify: %w", err)
	}
	return &notifier{d: d, base: context.Background(), timeout: cfg.Redis.Timeout, clock: clock.Wall{},
		log: log.With("component", "notify")}, nil
}

// OutboxResolved is the `resolved` event of a process that delivers no
// notifications itself (the standalone alert listener): each resolved
// alert's event, the same as Hooks.Resolved writes, goes to ob for the
// agents to deliver. nil when no sink is configured or there is no ob.
func OutboxResolved(cfg config.Config, ob notify.Outbox, instanceID string, log *slog.Logger) (func(rec state.TaskRecord), error) {
	if len(cfg.Notify) == 0 || ob == nil {
		return nil, nil
	}
	n, err := outboxNotifier(cfg, ob, instanceID, log)
	if err != nil {
		return nil, err
	}
	return n.resolved, nil
}

// addressedSink is a configured sink as the writer of an outbox entry
// sees it: its name and the events it wants. It never sends: the
// dispatcher that owns it only enqueues.
type addressedSink struct{ c notify.SinkConfig }

func (s addressedSink) Name() string                  { return s.c.Name }
func (s addressedSink) Wants(t notify.EventType) bool { return slices.Contains(s.c.On, t) }
func (s addressedSink) Timeout() time.Duration        { return s.c.EffectiveTimeout() }

// HasTarget writes an event for a write-back sink only when it names
// something the sink can write on, as the agent's own sink decides.
func (s addressedSink) HasTarget(ev notify.Event) bool { return notify.SinkApplies(s.c, ev) }
func (s addressedSink) Send(context.Context, notify.Delivery) error {
	return errors.New("notify: sink " + s.c.Name + " is delivered by the agents, not by this process")
}

// EvidenceOf is the evidence of a finished task's record: argv from the
// catalog's diagnostic (nil when the catalog no longer has it), the
// record's (redacted) output.
func EvidenceOf(rec state.TaskRecord, diag *runner.Diagnostic) report.Evidence {
	ev := report.Evidence{TaskID: rec.ID, Diagnostic: rec.Diagnostic, Host: rec.Host, Outcome: rec.Outcome,
		Truncated: rec.Truncated, Output: rec.Output, RanOn: rec.RanOn}
	ev.Alert.Severity = rec.Severity
	if rec.Alert != nil {
		ev.Alert.Source, ev.Alert.Name, ev.Alert.EventID = rec.Alert.Source, rec.Alert.Name, rec.Alert.EventID
		ev.Alert.Labels, ev.Alert.Annotations = rec.Alert.Labels, rec.Alert.Annotations
		ev.Alert.StartsAt, ev.Alert.Route = rec.Alert.StartsAt, rec.Alert.Route
	}
	if diag != nil {
		ev.Argv = diag.WithDefaults().Args(rec.Host, rec.ID, rec.Params)
	}
	if code := rec.Exit(); code >= 0 && rec.Outcome != outcome.TimedOut {
		ev.ExitCode = &code
	}
	if !rec.StartedAt.IsZero() && rec.FinishedAt.After(rec.StartedAt) {
		ev.Duration = report.Seconds(rec.FinishedAt.Sub(rec.StartedAt))
	}
	return ev
}

// reports queues the report of each finished task and stops the report
// workers with the drain. A nil *reports (reports off) does nothing.
type reports struct {
	r     *report.Reporter
	queue report.Queue // the Reporter's
	sink  report.Sink  // the Reporter's: the record and the report event
	cfg   report.Config
	clock clock.Clock
	log   *slog.Logger
}

// wireReports builds the Reporter when report.enabled: parts from
// Deps.Reports (Open builds them), else in memory with no provider, which
// is an error.
func (b builder) wireReports(o Options) error {
	h := b.h
	if !o.Config.Report.Enabled {
		return nil
	}
	if o.Reports == nil || o.Reports.Provider == nil {
		return fmt.Errorf("hooks: report: enabled without a provider")
	}
	// A copy: the defaults and the investigation are the hooks' own,
	// never written into the caller's parts.
	parts := *o.Reports
	if parts.Queue == nil {
		parts.Queue = report.NewMemoryQueue(o.Config.Report.JobLease(), nil)
	}
	if parts.Backend == nil {
		parts.Backend = limiter.NewMemory()
	}
	if parts.Writer == nil {
		iv, err := b.investigator(o, parts)
		if err != nil {
			return err
		}
		if iv != nil {
			parts.Writer = iv
		}
	}
	sink := reportSink(o.Store, h.notifier, o.ReportWritten)
	r, err := NewReporter(o.Config, &parts, sink, h.redactor, o.InstanceID,
		o.Registry, o.Logger)
	if err != nil {
		return err
	}
	h.reports = &reports{r: r, queue: parts.Queue, sink: sink, cfg: o.Config.Report.Config,
		clock: o.Clock, log: o.Logger.With("component", "report")}
	return nil
}

// run runs the report workers until the drain stops them; a fast exit
// (hard ending) abandons the reports in progress, which stay queued.
//
//nolint:contextcheck // Stop gets an ended context on purpose: give up at once
func (rs *reports) run(ctx, hard context.Context) error {
	if rs == nil {
		return nil
	}
	stop := context.AfterFunc(hard, func() {
		done, cancel := context.WithCancel(context.Background())
		cancel()
		_ = rs.r.Stop(done)
	})
	defer stop()
	return rs.r.Run(ctx)
}

// writes is the report job of a task that ran, when its outcome is in
// report.on, for the store to make with the task's final record (and
// only when it writes the record): a report never delays the task's
// outcome by a round trip of its own. A failure is logged; the task is
// not affected.
func (rs *reports) writes(rec state.TaskRecord, diag runner.Diagnostic, res runner.Result) []state.Write {
	if rs == nil || !rs.wants(rec) || rec.Origin != "" {
		// An investigation's tool call is evidence of its parent's
		// report, never the start of a report of its own.
		return nil
	}
	ev := EvidenceOf(rec, &diag)
	ev.Duration = report.Seconds(res.Duration)
	j := rs.r.Prepare(report.Job{ID: rec.ID, Evidence: ev, EnqueuedAt: rs.clock.Now(), TraceID: rec.TraceID, SpanID: rec.SpanID})
	id := rec.ID // not rec: see notifier.writes
	w := state.Write{Apply: func(ctx context.Context) {
		if err := rs.r.Enqueue(ctx, j); err != nil {
			rs.log.Warn("report job not queued; the task has no report", "task_id", id, "err", err)
		}
	}}
	if rs.queue != nil {
		if a, err := rs.queue.AddArgs(j); err == nil && a != nil {
			w.Stream, w.Done = a, func(string) { rs.r.Kick() }
		}
	}
	return []state.Write{w}
}

// wants: the outcome is in report.on, or the task ran and its route asks
// for a report always (`investigate: always`).
func (rs *reports) wants(rec state.TaskRecord) bool {
	if rs.cfg.Wants(rec.Outcome) {
		return true
	}
	always := rec.Alert != nil && rec.Alert.Investigate == "always"
	return always && rs.cfg.Enabled && outcome.Ran(rec.Outcome)
}

// drainStarted takes no new report job; queued ones stay for other agents.
func (rs *reports) drainStarted() {
	if rs == nil {
		return
	}
	rs.r.Drain()
}

// drainEnded waits for the reports in progress within what is left of
// the drain deadline (ending early with stop), then abandons them to the
// queue, so that the lifecycle completion is never late because of a
// model.
func (rs *reports) drainEnded(stop context.Context, deadline time.Time) {
	if rs == nil {
		return
	}
	left := time.Duration(0)
	if !deadline.IsZero() {
		left = deadline.Sub(rs.clock.Now())
	}
	ctx, cancel := context.WithTimeout(stop, max(left, 0))
	defer cancel()
	if err := rs.r.Stop(ctx); err != nil {
		rs.log.Warn("reports in progress cut short by the drain deadline; their jobs stay queued for other agents", "err", err)
	}
}
