package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/outcome"
)

// A host-local diagnostic (runs_on target) runs only on the agent that
// owns the task's host. Before a target task takes a worker, place finds
// where it belongs: here (it runs), another live agent (the message is
// handed to it through the state store and this agent lets it go), or
// nowhere (it waits up to queue.target_wait, then ends rejected). The
// queue's message stays the task's one durable copy: the agent it is
// handed to holds it, runs it under the same lease, limiter decision and
// record as any received message, and deletes it.

// Hosts is the state the placement uses: who owns a host name, and the
// per-instance hand-off of task messages (state.RedisPresence's names,
// state.RedisHandoff's tasks).
type Hosts interface {
	state.HostNames
	GiveTask(ctx context.Context, instanceID, body string, ttl time.Duration) error
	TakeTasks(ctx context.Context, instanceID, after string, count int, block time.Duration) ([]state.HandedNotice, error)
	ForgetTasks(ctx context.Context, instanceID string, ids ...string) error
}

var _ Hosts = struct {
	state.HostNames
	*state.RedisHandoff
}{}

// Placement is where target tasks run: this agent's names and, with a
// shared store, how to find and reach the owner of another.
type Placement struct {
	// Names are the host names this agent answers for, normalised, its
	// canonical one first. None = no placement: every task runs where it
	// is received.
	Names []string
	// Hosts finds owners and hands tasks over; nil = one agent alone
	// (embedded mode): a target task for another host is refused
	// (not_this_host).
	Hosts Hosts
	// TargetWait is how long a target task whose host no live agent owns
	// waits for one (queue.target_wait), from the task's creation (else
	// its message's first send, else its first receive here).
	TargetWait time.Duration
	// Routing counts each placement by result (RoutingResults), every
	// label initialised by the caller; nil = not counted.
	Routing *prometheus.CounterVec
	// Ambiguous, when set, names the live agents that claim one of
	// this agent's own names when another claims it too (nil when this
	// agent alone does): a target task for it runs nowhere.
	Ambiguous func(name string) []string
}

// Results of autodiag_task_routing_total, and the reasons a target task
// that cannot run on its target ends rejected with.
const (
	RoutingHere       = "here"
	RoutingHanded     = "handed"
	RoutingWaiting    = "waiting"
	ReasonNoAgent     = "no_agent_for_host"
	ReasonDraining    = "target_draining"
	ReasonStandby     = "target_standby"
	ReasonAmbiguous   = "ambiguous_host"
	ReasonNotThisHost = "not_this_host"
	handedTTL         = 10 * time.Minute
	targetWaitRecheck = 10 * time.Second
	// targetWaitRecheckMax caps targetWaitStep.
	targetWaitRecheckMax = 30 * time.Second
	handedBlock          = 10 * time.Second
	handedReadRetryMax   = 5 * time.Second
)

// RoutingResults are every value of autodiag_task_routing_total's result.
func RoutingResults() []string {
	return []string{RoutingHere, RoutingHanded, RoutingWaiting, ReasonNoAgent, ReasonDraining, ReasonStandby, ReasonAmbiguous, ReasonNotThisHost}
}

// placer decides where each target task runs.
type placer struct {
	Placement
	self  string
	own   map[string]bool
	specs map[string]spec
	log   *slog.Logger
}

func newPlacer(pl Placement, self string, specs map[string]spec, log *slog.Logger) *placer {
	if len(pl.Names) == 0 {
		return nil
	}
	own := make(map[string]bool, len(pl.Names))
	for _, n := range pl.Names {
		own[n] = true
	}
	return &placer{Placement: pl, self: self, own: own, specs: specs, log: log}
}

func (pl *placer) count(result string) {
	if pl.Routing != nil {
		pl.Routing.WithLabelValues(result).Inc()
	}
}

// targeted reports whether t's diagnostic must run on its host's agent.
func (pl *placer) targeted(t task.Task) bool {
	return pl.specs[t.Diagnostic].targeted
}

// NotThisHost is the refusal of a target task for a host this agent does
// not answer for when no other agent can take it (embedded mode), naming
// the names it answers for; nil when the task may be taken.
func (pl *placer) NotThisHost(t task.Task) error {
	if pl == nil || pl.Hosts != nil || !pl.targeted(t) || pl.own[t.Host] {
		return nil
	}
	return &task.Error{Reason: ReasonNotThisHost, Field: "host",
		Detail: fmt.Sprintf("%s runs on the machine it describes, and this agent answers only for %s (add the name to host_names, or AUTODIAG_HOST_NAMES)",
			t.Diagnostic, strings.Join(pl.Names, ", "))}
}

// canonical names a target task running here by this machine's canonical
// name (its first), keeping the name it came with beside it: the record and
// the limiter's host key are then one per machine, so a host named by its
// address, its DNS name and its instance id shares one quota.
func (p *pipeline) canonical(j *job) {
	name := p.placer.Names[0]
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.task.Host != name {
		j.hostAsSent, j.task.Host = j.task.Host, name
		j.shown = quoteNames(j.task)
		if p.dedupeKey != "" {
			j.dedupe, _ = j.task.Field(p.dedupeKey)
		}
	}
}

// endAmbiguous ends a target task whose host more than one live agent
// claims: run on neither, rejected ambiguous_host.
func (p *pipeline) endAmbiguous(j *job, amb *state.AmbiguousHostError) {
	t := j.task
	p.placer.count(ReasonAmbiguous)
	p.log.WarnContext(j.context(), "host name claimed by more than one live agent; its target tasks do not run until one lets it go",
		"task_id", t.ID, "host", t.Host, "instances", strings.Join(amb.IDs, ","))
	p.endUnplaced(j, &task.Error{Reason: ReasonAmbiguous, Field: "host",
		Detail: fmt.Sprintf("%s is claimed by more than one live agent (%s)", t.Host, strings.Join(amb.IDs, ", "))})
}

func (pl *placer) ambiguous(name string) []string {
	if pl.Ambiguous == nil {
		return nil
	}
	return pl.Ambiguous(name)
}

// Instance states placement tells apart (state.Instance.State).
const (
	stateRunning = state.InstanceInService
	stateWarmed  = "warmed"
)

// waitForOwner defers a target task whose host no live agent owns, by
// targetWaitStep each time, until queue.target_wait after the task began;
// then it ends rejected
// (no_agent_for_host), never run elsewhere. An investigation's tool call
// does not wait.
func (p *pipeline) waitForOwner(j *job) bool {
	t := j.task
	began := t.CreatedAt
	if began.IsZero() {
		began = j.msg.SentAt
	}
	if began.IsZero() {
		began = j.received
	}
	left := p.placer.TargetWait - p.clock.Now().Sub(began)
	if t.Origin == task.OriginInvestigation {
		// A tool call waits within the investigation's wall time: a host
		// without an agent is a gap in its evidence at once, not minutes
		// of it spent waiting.
		left = 0
	}
	if left <= 0 {
		p.placer.count(ReasonNoAgent)
		p.endUnplaced(j, &task.Error{Reason: ReasonNoAgent, Field: "host",
			Detail: fmt.Sprintf("no live agent answers for %s after queue.target_wait %s", t.Host, p.placer.TargetWait)})
		return true
	}
	p.placer.count(RoutingWaiting)
	p.handBack(j, back{why: backTargetWait, after: targetWaitStep(p.clock.Now().Sub(began), left),
		attrs: []any{"detail", "no live agent answers for the task's host yet", "host", t.Host, "wait_left", left.Seconds()}})
	return true
}

// targetWaitStep is how long a target task that has waited waited for an
// agent of its host stays hidden before it looks again, with left of
// queue.target_wait to go: as long as it has waited, from
// targetWaitRecheck up to targetWaitRecheckMax, and never past
// target_wait, where it ends. A host's agent that comes up is found within
// the time its tasks had already waited (at most targetWaitRecheckMax),
// and a task that waits the whole queue.target_wait comes back a handful
// of times (10 s, 20 s, 40 s, 70 s, 100 s, 120 s for 2m) rather than every
// targetWaitRecheck: each return is a receive and a visibility change.
func targetWaitStep(waited, left time.Duration) time.Duration {
	return min(left, max(targetWaitRecheck, min(waited, targetWaitRecheckMax)))
}

// endUnplaced ends a target task that cannot run on its target: rejected
// with the reason, never run. It takes the task's lease without a limiter
// decision, so that the end is written once, as a record like any other
// (show, the API, notifications) with its audit entry, and the message is
// deleted. When the store cannot give the lease the task is rejected as an
// invalid one is (audit entry, dead-letter).
func (p *pipeline) endUnplaced(j *job, err error) {
	reason := task.Reason(err)
	var c state.Claim
	cerr := p.calls.storeCall(func(ctx context.Context) (err error) {
		c, err = p.store.Claim(ctx, newRecord(j, p.redactor), p.instanceID, p.lease)
		return err
	})
	if cerr != nil {
		p.calls.degraded("claim")
		p.reject(j, err)
		return
	}
	switch c.Result {
	case state.AlreadyDone:
		p.outcomes.end(j, ended{outcome: outcome.Duplicate, reason: "already_done", detail: "ended earlier as " + c.Record.Outcome})
		p.ack(j)
		return
	case state.HeldElsewhere:
		p.handBack(j, back{why: backRunningElsewhere, after: c.LeaseRemaining + lookAgainMargin,
			attrs: []any{"detail", "running on another agent", "owner", c.Record.Owner}})
		return
	}
	j.leased = true
	rec := c.Record
	rec.Outcome, rec.Reason = outcome.Rejected, reason
	rec.ExitCode = new(-1) // not started
	p.finish(j, rec, ended{outcome: outcome.Rejected, reason: reason, detail: err.Error()})
	p.ack(j)
}

// handed is a task message as one agent hands it to another: what the
// owner needs to hold, run and delete it as if it had received it.
type handed struct {
	ID           string            `json:"id"`
	Body         string            `json:"body"`
	ReceiveCount int               `json:"receive_count"`
	SentAt       time.Time         `json:"sent_at,omitzero"`
	Attributes   map[string]string `json:"attributes,omitempty"`
	TraceHeader  string            `json:"trace_header,omitempty"`
	Handle       string            `json:"handle"`
	From         string            `json:"from"`
	// ReceivedAt is when From received the message: the hand-off delay
	// counts from it (zero from an agent that predates it: not counted).
	ReceivedAt time.Time `json:"received_at,omitzero"`
}

func handedOf(m *queue.Message, from string, received time.Time) handed {
	return handed{ID: m.ID, Body: string(m.Body), ReceiveCount: m.ReceiveCount, SentAt: m.SentAt, Attributes: m.Attributes,
		TraceHeader: m.TraceHeader, Handle: m.Handle, From: from, ReceivedAt: received}
}

func (h handed) message() *queue.Message {
	return &queue.Message{ID: h.ID, Body: []byte(h.Body), ReceiveCount: h.ReceiveCount, SentAt: h.SentAt, Attributes: h.Attributes,
		TraceHeader: h.TraceHeader, Handle: h.Handle, ReceivedAt: h.ReceivedAt}
}

// TakeHanded accepts the task messages other agents hand to this one until
// ctx ends (the drain's first instant, or a fast exit). Its read blocks on
// the hand-off stream by itself, apart from the queue's receives: a handed
// task is taken the moment it is handed, whatever the receive window
// holds, and waits here for a worker like a received message. It takes no
// slot of the receive window, which bounds what this agent takes from the
// shared queue ahead of its workers so that the others get their share: a
// handed task can run nowhere else. Held from its taking (queue.Source
// Hold, counting from the sender's receive), its message's visibility is
// extended until it ends, so it is not received again while it waits.
// handedHeldMax bounds the handed tasks held at once; past it the rest
// wait in the stream. What is left when TakeHanded ends comes back through
// the queue once the message's visibility lapses, and is placed again.
func (w *Worker) TakeHanded(ctx context.Context) {
	p := w.pipeline
	pl := p.placer
	if pl == nil || pl.Hosts == nil {
		return
	}
	held := p.handed
	after := ""
	retry := time.Duration(0)
	for ctx.Err() == nil {
		if err := held.Acquire(ctx, 1); err != nil {
			return
		}
		n := 1
		for n < maxHandedRead && held.TryAcquire(1) {
			n++
		}
		// The read blocks up to handedBlock and is cut short when ctx ends.
		rctx, cancel := context.WithTimeout(ctx, handedBlock+w.storeTimeout+time.Second)
		got, err := pl.Hosts.TakeTasks(rctx, w.instanceID, after, n, handedBlock)
		cancel()
		// Each task read takes one slot to its job.
		held.Release(int64(n - len(got)))
		if err != nil {
			retry = min(max(2*retry, 100*time.Millisecond), handedReadRetryMax)
			w.log.Warn("reading the tasks handed to this agent failed", "retry_in", retry.Seconds(), "err", err)
			t := time.NewTimer(retry)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		retry = 0
		ids := make([]string, 0, len(got))
		for _, e := range got {
			ids = append(ids, e.ID)
			after = e.ID
			var h handed
			if jerr := json.Unmarshal([]byte(e.Body), &h); jerr != nil || h.Handle == "" {
				held.Release(1)
				w.log.Warn("a handed task could not be read; its message comes back through the queue", "entry", e.ID, "err", jerr)
				continue
			}
			// Like a received message, the handler outlives the intake.
			m := h.message()
			p.take(m, &h, func() { held.Release(1) }, p.src.Hold(m)) //nolint:contextcheck // see above
		}
		if len(ids) > 0 {
			// Bounded by redis.timeout on a context of its own, as every store call.
			if err := w.pipeline.calls.storeCall(func(cctx context.Context) error { //nolint:contextcheck // see above
				return pl.Hosts.ForgetTasks(cctx, w.instanceID, ids...)
			}); err != nil {
				w.log.Debug("forgetting taken hand-offs failed; they lapse with their TTL", "err", err)
			}
		}
	}
}

// maxHandedRead is the most handed tasks one read takes: a receive's
// batch.
const maxHandedRead = 10

// handedHeldMax bounds the handed tasks an agent holds unended. It bounds
// memory and the visibility extensions (one call per 10 held, every third
// of the visibility timeout), not throughput: a task handed here can run
// nowhere else, so one held here waits for a worker rather than lapsing in
// the stream and coming back through the queue to be handed again. A
// storm of tasks for one host is met by the limiter, which ends most of
// them at once.
const handedHeldMax = 1000
