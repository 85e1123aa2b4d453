package worker

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/clock"
)

// Hooks act on a task's end: Keep uploads the whole output of a run (and
// may set the record's output fields), Writes are the notification and
// the report job written in one store call with the final record (res is
// nil for an outcome without a run).
type Hooks interface {
	Keep(rec *state.TaskRecord, res *runner.Result, d runner.Diagnostic)
	Writes(rec state.TaskRecord, d runner.Diagnostic, res *runner.Result) []state.Write
}

// Store is the state the worker uses: task leases and records, the audit
// stream, the rejected-message marks and, at start, this instance's
// in-flight entries.
type Store interface {
	state.LeaseStore
	state.TaskStore
	state.AuditLog
	state.Marks
	Inflight(ctx context.Context, instanceID string) ([]state.InflightEntry, error)
}

// Validator checks a decoded task before anything shared is touched
// (host allow-list, catalog, parameters, age); *task.Validator is the
// real one.
type Validator interface {
	Validate(t *task.Task, now time.Time) error
}

var _ Validator = (*task.Validator)(nil)

// Tracker is the part of the drain the worker uses: each received message
// is tracked, so that a drain waits for it or releases it
// (*drain.Controller).
type Tracker interface {
	Track(release func()) *drain.Item
}

var _ Tracker = (*drain.Controller)(nil)

// Options are what a Worker is built from.
type Options struct {
	Source    queue.Source
	Store     Store
	Limiter   Decider
	Runner    Runner
	Validator Validator
	Catalog   map[string]runner.Diagnostic
	Drain     Tracker
	Clock     clock.Clock
	Logger    *slog.Logger
	Metrics   Metrics
	// Redactor is the one chokepoint every output passes before it is
	// stored, logged or sent.
	Redactor *redact.Redactor
	// UploadMax is results.s3.max_size when the whole output of each run
	// is uploaded (Hooks.Keep), 0 when not: what a run keeps before the
	// cut is then the larger of it and the diagnostic's max_output.
	UploadMax runner.Size
	Hooks     Hooks
	// Alerts routes alarms received on the task queue; nil = none.
	Alerts     *AlertRouting
	InstanceID string
	Workers    int
	BatchSize  int           // queue.batch_size
	Lease      time.Duration // queue.visibility_timeout
	DedupeKey  string        // limiter.dedupe.key
	// StoreTimeout bounds each store call (redis.timeout); StateFail is
	// redis.state_fail.
	StoreTimeout time.Duration
	StateFail    string
	// Hard ends on a fast exit: running work is killed and released.
	Hard context.Context
	// Tracing names the queue in the worker's spans.
	Tracing Tracing
	// Hostname is this machine's hostname, learnt once at start: with
	// InstanceID it is the ran_on each run's record carries.
	Hostname string
	// Placement sends each target task to the agent of its host; zero =
	// every task runs where it is received.
	Placement Placement
	// Approvals parks the tasks of diagnostics with approval: required
	// until a person decides (approve.go); nil = such tasks run
	// ungated.
	Approvals Approvals
	// Submitter is the way in built before the worker (NewSubmitter over
	// these Options): the worker ends its tasks through its outcome
	// recorder. nil = New builds one.
	Submitter *Submitter
	// AlertBatch sends the tasks of one alert in batches (SQS
	// SendMessageBatch) for the Submitter; nil = one Source.Send each.
	AlertBatch alert.Sender
}

// Worker takes tasks from the queue to their outcome: the receiver
// (receiver.go) receives while there are free slots, the pipeline
// (pipeline.go) takes each message through validate → approve → place →
// claim → decide → run → record → finish → ack, and the outcome recorder
// (outcome.go) writes each task's one outcome.
type Worker struct {
	// Submitter is the one way a task enters the queue from outside it
	// (Submit, SubmitBody, SendBatch).
	*Submitter
	receiver *receiver
	pipeline *pipeline
	backlog  *recordBacklog
	outcomes *outcomeRecorder
	store    Store
	clock    clock.Clock
	log      *slog.Logger
	// instanceID and storeTimeout are for Recover.
	instanceID   string
	storeTimeout time.Duration
}

// spec is one catalog diagnostic as a task's walk uses it, resolved once
// at New: the walk reads it from its job rather than looking the catalog
// up and applying defaults at each step.
type spec struct {
	// diag is the diagnostic as configured: its argv, and what the hooks
	// get.
	diag runner.Diagnostic
	// run is diag with its defaults (timeout, max_output,
	// approval_timeout).
	run runner.Diagnostic
	// targeted: it runs only on its host's agent (runs_on target).
	targeted bool
}

// specsOf resolves every diagnostic of the catalog.
func specsOf(catalog map[string]runner.Diagnostic) map[string]spec {
	specs := make(map[string]spec, len(catalog))
	for name, d := range catalog {
		specs[name] = spec{diag: d, run: d.WithDefaults(), targeted: d.Targeted()}
	}
	return specs
}

// New builds the worker; Receive runs it.
func New(o Options) *Worker {
	submitter := o.Submitter
	if submitter == nil {
		submitter = NewSubmitter(o)
	}
	outcomes := submitter.outcomes
	workers := int64(o.Workers)
	receive := newWindow(workers, int64(o.BatchSize), o.Clock.Now, o.Metrics.ReceiveWindow)
	specs := specsOf(o.Catalog)
	p := &pipeline{specs: specs, src: o.Source, store: o.Store, limiter: o.Limiter, runner: o.Runner, hooks: o.Hooks, validator: o.Validator, outcomes: outcomes, drain: o.Drain, clock: o.Clock,
		log: o.Logger, redactor: o.Redactor, receive: receive, handed: semaphore.NewWeighted(handedHeldMax), run: semaphore.NewWeighted(workers),
		idle: make(chan struct{}, 1), hard: o.Hard, alerts: o.Alerts, trace: o.Tracing,
		ranOn: taskview.RanOn{InstanceID: o.InstanceID, Hostname: o.Hostname}, approvals: o.Approvals,
		uploadMax: o.UploadMax, instanceID: o.InstanceID, lease: o.Lease, dedupeKey: o.DedupeKey, stateFail: o.StateFail}
	// As many handlers as the receive window holds, at most, are idle
	// between bursts.
	p.goroutines = newHandlerGoroutines(&p.handlers, 2*o.Workers)
	p.calls = &storeCalls{timeout: o.StoreTimeout, degradedOps: o.Metrics.StateDegraded}
	p.leases = &leases{store: o.Store, limiter: o.Limiter, calls: p.calls, log: o.Logger, instanceID: o.InstanceID,
		lease: o.Lease, storeTimeout: o.StoreTimeout, running: map[string]bool{}}
	backlog := &recordBacklog{store: o.Store, calls: p.calls, log: o.Logger, hard: o.Hard, handlers: &p.handlers}
	p.backlog = backlog
	p.placer = newPlacer(o.Placement, o.InstanceID, specs, o.Logger)
	r := &receiver{src: o.Source, slots: receive, observe: receive.received, batch: o.BatchSize, log: o.Logger, accept: p.accept, trace: o.Tracing,
		buffered: func() int { return int(p.waiting.Load()) }, idle: p.idle,
		polls: receive.most(), pollsNow: receive.receives}
	return &Worker{Submitter: submitter, receiver: r, pipeline: p, backlog: backlog, outcomes: outcomes, store: o.Store, clock: o.Clock, log: o.Logger,
		instanceID: o.InstanceID, storeTimeout: o.StoreTimeout}
}

// Receive receives and handles messages until ctx ends (the drain's
// first instant, or a fast exit).
func (w *Worker) Receive(ctx context.Context) { w.receiver.run(ctx) }

// TakeIn handles messages received outside the receive window: what a
// queue.Sealer gave back when the intake stopped, work this agent alone
// accepted. Each is held and handled as a receive's message is, with no
// receive slot to give back; the worker slots still bound what runs.
func (w *Worker) TakeIn(msgs []*queue.Message) {
	p := w.pipeline
	for _, m := range msgs {
		p.take(m, nil, func() {}, p.src.Hold(m))
	}
}

// Wait returns once every message's handler has.
func (w *Worker) Wait() { w.pipeline.wait() }

// Outcomes are the counts of the task outcomes written so far.
func (w *Worker) Outcomes() map[string]int64 { return w.outcomes.snapshot() }

// InFlight is the number of received tasks without an outcome yet.
func (w *Worker) InFlight() int { return w.outcomes.inFlight() }

// Backlogged is the number of finished records waiting for the state
// store to answer again.
func (w *Worker) Backlogged() int { return w.backlog.backlogged() }
