package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
)

// Submitter is the one way a task enters the task queue from outside it:
// POST /v1/tasks, an investigation's tool call and the tasks alerts
// become all pass Submit (validate → reject → stamp → send), so a task
// one of them refuses is ended and recorded exactly as the others would
// end it, and as the pipeline ends an invalid message. NewSubmitter
// builds it before the worker, which the hooks (investigations) need it
// before; the worker ends its tasks through the same outcome recorder
// (Options.Submitter).
type Submitter struct {
	src queue.Source
	// batch sends the tasks of one alert in batches (SQS
	// SendMessageBatch); nil = one Source.Send each.
	batch     alert.Sender
	validator Validator
	placer    *placer
	outcomes  *outcomeRecorder
	clock     clock.Clock
}

// NewSubmitter builds the submitter over o's Source, Validator,
// Placement and outcome recording (Store, Metrics, Redactor, Catalog).
func NewSubmitter(o Options) *Submitter {
	known := func(name string) bool { _, ok := o.Catalog[name]; return ok }
	outcomes := &outcomeRecorder{log: o.Logger, m: o.Metrics, store: o.Store, clock: o.Clock, instanceID: o.InstanceID,
		timeout: o.StoreTimeout, counts: map[string]int64{}, known: known, redactor: o.Redactor}
	return &Submitter{src: o.Source, batch: o.AlertBatch, validator: o.Validator,
		placer: newPlacer(o.Placement, o.InstanceID, specsOf(o.Catalog), o.Logger), outcomes: outcomes, clock: o.Clock}
}

// Submit validates t as a received task is validated (and, without a
// fleet to hand it to, refuses a target task of a host this agent does
// not answer for: not_this_host); a task that fails is ended here as
// rejected, or stale past queue.max_age, and its *task.Error returned
// (task.Reason says which). A valid one is stamped (an id when it has
// none, created_at when unset), sent onto the queue under ctx (the send's
// span is a child of ctx's), and returned as sent. A send that fails
// records nothing: its error is not a *task.Error.
func (s *Submitter) Submit(ctx context.Context, t task.Task) (task.Task, error) {
	t, err := s.accept(t) //nolint:contextcheck // a rejection's audit write is detached from the caller by design (reject)
	if err != nil {
		return t, err
	}
	body, err := json.Marshal(t)
	if err != nil {
		return t, fmt.Errorf("task %s: %w", t.ID, err)
	}
	if _, err := s.src.Send(ctx, body); err != nil {
		return t, fmt.Errorf("queue: %w", err)
	}
	return t, nil
}

// SubmitBody is Submit for a task message's body (POST /v1/tasks): a body
// that does not decode (too large, not one JSON task) is ended as
// rejected like an invalid task.
func (s *Submitter) SubmitBody(ctx context.Context, body []byte) (task.Task, error) {
	t, err := task.Decode(body)
	if err != nil {
		s.reject(t, err) //nolint:contextcheck // see reject
		return t, err
	}
	return s.Submit(ctx, t)
}

// SendBatch submits an alert's tasks (alert.Sender): each one validated
// and stamped as Submit does, the ones refused ended as rejected and left
// out, the rest sent in batches when the queue takes them (SQS), else one
// by one. An error means the tasks may not all be queued.
func (s *Submitter) SendBatch(ctx context.Context, tasks []task.Task) error {
	ok := make([]task.Task, 0, len(tasks))
	for _, t := range tasks {
		if t, err := s.accept(t); err == nil { //nolint:contextcheck // see reject
			ok = append(ok, t)
		}
	}
	if s.batch != nil {
		return s.batch.SendBatch(ctx, ok)
	}
	for i := range ok {
		body, err := json.Marshal(&ok[i])
		if err != nil {
			return fmt.Errorf("alert task %s: %w", ok[i].ID, err)
		}
		if _, err := s.src.Send(ctx, body); err != nil {
			return fmt.Errorf("alert task %s: %w", ok[i].ID, err)
		}
	}
	return nil
}

var _ alert.Sender = (*Submitter)(nil)

// accept is Submit's validate → reject → stamp.
func (s *Submitter) accept(t task.Task) (task.Task, error) {
	now := s.clock.Now()
	err := s.validator.Validate(&t, now)
	if err == nil {
		if err = s.placer.NotThisHost(t); err != nil {
			// One agent alone cannot run a host-local diagnostic of
			// another machine: said at once, with the names it answers
			// for.
			s.placer.count(ReasonNotThisHost)
		}
	}
	if err != nil {
		s.reject(t, err)
		return t, err
	}
	if t.ID == "" {
		t.ID = "api-" + randomID()
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = now.UTC()
	}
	return t, nil
}

// reject ends a task that never reached the queue as rejected, or stale
// when it is older than queue.max_age, as the pipeline ends such a
// message. The outcome's audit write is detached from the caller by
// design: it lands even when the client or the investigation has gone.
func (s *Submitter) reject(t task.Task, err error) {
	s.outcomes.received(true)
	j := &job{task: t, received: s.clock.Now()}
	end := outcome.Rejected
	if task.Reason(err) == task.ReasonStale {
		end = outcome.Stale
	}
	s.outcomes.end(j, ended{outcome: end, reason: task.Reason(err), detail: err.Error()})
}

// Names are the host names this agent answers for, the canonical one
// first; nil without placement.
func (s *Submitter) Names() []string {
	if s.placer == nil {
		return nil
	}
	return s.placer.Names
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
