package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/internal/clock"

	"github.com/autodiag/autodiag/internal/configerr"
)

// SQSAPI is the part of *sqs.Client the SQS source uses, in the SDK's own
// signatures, so tests can hand it a fake or a client of the sqsfake server.
type SQSAPI interface {
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, params *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, params *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	SendMessage(ctx context.Context, params *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, params *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

var _ SQSAPI = (*sqs.Client)(nil)

// SQS limits the source respects.
const (
	maxSQSBatch      = 10               // ReceiveMessage / DeleteMessageBatch entries
	maxSQSWait       = 20 * time.Second // WaitTimeSeconds
	maxSQSVisibility = 12 * time.Hour   // ChangeMessageVisibility
	maxSQSAttributes = 10               // message attributes per message
	deleteFlushLimit = 30 * time.Second // bound of one delete flush, retries included
	deleteRetryPause = 100 * time.Millisecond
)

// SQSOptions configure an SQS source; zero values take the defaults.
type SQSOptions struct {
	// QueueURL is the task queue (queue.url). Required.
	QueueURL string
	// DLQURL receives rejected messages (queue.dlq_url); empty leaves them
	// to the queue's redrive policy (DeadLetter returns ErrNoDeadLetter).
	DLQURL string
	// WaitTime is the long-poll time of one ReceiveMessage (queue.wait_time,
	// default 20s, at most 20s).
	WaitTime time.Duration
	// VisibilityTimeout is requested on every receive
	// (queue.visibility_timeout); zero uses the queue's own setting.
	VisibilityTimeout time.Duration
	// DeleteBatchWindow bounds how long a delete waits for a
	// DeleteMessageBatch already in flight, or for other deletes right
	// after one returned, before it is sent anyway (default 10ms), unless
	// the rate of deletes widens the gather (DeleteBatchMaxWait); see
	// Delete.
	DeleteBatchWindow time.Duration
	// DeleteBatchMaxWait is the wider gather of a busy source: when the
	// last 10 deletes arrived within it, a delete waits up to this long
	// for its batch to fill, so batches fill at tens of tasks a second
	// too; no delete waits longer than this, or DeleteBatchWindow if
	// longer, for its batch to be sent (default 100ms). See Delete.
	DeleteBatchMaxWait time.Duration
	// ReceiveGrace is how long a poll in progress may still begin to answer
	// after Receive's ctx ends (default 20ms); an answer whose first byte
	// has arrived by then gets up to a second more to be read. See Receive.
	ReceiveGrace time.Duration
	// DeleteRetries is how many times entries that failed inside a batch
	// with a server-side fault are sent again (default 3).
	DeleteRetries int
	// Logger receives warnings about failed deletes; nil discards them.
	Logger *slog.Logger
	// Clock is what ChangeVisibility measures a message's time in
	// flight with; nil = the wall clock.
	Clock clock.Clock
	// OnGraceDecided, when set, is called as a cancelled poll's grace ends,
	// with whether its answer had begun; tests observe the decision with it.
	OnGraceDecided func(answering bool)
}

// Validate reports every problem with o at once, each a *configerr.Error
// whose key is relative to the configuration's queue section (options
// that are not configuration keys are named by their field).
func (o SQSOptions) Validate() error {
	var errs []error
	if o.QueueURL == "" {
		errs = append(errs, configerr.Errorf("url", "required for the SQS source"))
	}
	if o.WaitTime < 0 || o.WaitTime > maxSQSWait {
		errs = append(errs, configerr.Errorf("wait_time", "%v is outside 0s..20s", o.WaitTime))
	}
	if o.VisibilityTimeout < 0 || o.VisibilityTimeout > maxSQSVisibility {
		errs = append(errs, configerr.Errorf("visibility_timeout", "%v is outside 0s..12h", o.VisibilityTimeout))
	}
	if o.DeleteBatchWindow < 0 {
		errs = append(errs, configerr.Errorf("DeleteBatchWindow", "%v is negative", o.DeleteBatchWindow))
	}
	if o.DeleteBatchMaxWait < 0 {
		errs = append(errs, configerr.Errorf("DeleteBatchMaxWait", "%v is negative", o.DeleteBatchMaxWait))
	}
	return errors.Join(errs...)
}

// SQS is a Source on an Amazon SQS standard queue: long polling, batched
// deletes with per-entry retries, visibility changes and a dead-letter queue
// for rejected messages. Throttling and 5xx answers are retried with backoff
// by the client's SDK retryer; SQS adds no retry loop of its own except for
// per-entry failures inside a successful DeleteMessageBatch.
type SQS struct {
	c   SQSAPI
	o   SQSOptions
	log *slog.Logger

	stop   context.Context // cancelled by Close: aborts long polls
	cancel context.CancelFunc
	// flush is stop without its cancellation: delete batches carry many
	// callers' deletes and outlive each caller's context, and Close sends
	// the last of them after it cancels stop.
	flush context.Context

	mu       sync.Mutex
	closed   bool
	received map[string]receipt // by handle
	pruned   time.Time          // last pruneLocked scan
	pending  []*pendingDelete
	sending  int // DeleteMessageBatch calls in flight
	timer    *time.Timer
	flushes  sync.WaitGroup
	// returned is when the last DeleteMessageBatch returned: a delete made
	// within DeleteBatchWindow of it finds the source busy.
	returned time.Time
	// arrivals are the times of the last maxSQSBatch deletes, a ring whose
	// oldest is at arrival: how long a batch's worth took to arrive.
	arrivals [maxSQSBatch]time.Time
	arrival  int

	taskAttrs, dlqAttrs attrCache
	keep                *keeper
}

type pendingDelete struct {
	handle string
	id     string // message id, for logs
	done   chan error
}

var _ Source = (*SQS)(nil)

// NewSQS returns a Source reading o.QueueURL through client (typically
// sqs.NewFromConfig(cfg) with the SDK's default retryer).
func NewSQS(client SQSAPI, o SQSOptions) *SQS {
	if o.WaitTime == 0 {
		o.WaitTime = maxSQSWait
	}
	o.WaitTime = min(o.WaitTime, maxSQSWait)
	if o.DeleteBatchWindow <= 0 {
		o.DeleteBatchWindow = 10 * time.Millisecond
	}
	if o.DeleteBatchMaxWait <= 0 {
		o.DeleteBatchMaxWait = 100 * time.Millisecond
	}
	if o.DeleteRetries <= 0 {
		o.DeleteRetries = 3
	}
	if o.ReceiveGrace <= 0 {
		o.ReceiveGrace = 20 * time.Millisecond
	}
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.OnGraceDecided == nil {
		o.OnGraceDecided = func(bool) {}
	}
	stop, cancel := context.WithCancel(context.Background())
	s := &SQS{
		c: client, o: o, log: log.With("component", "queue.sqs"),
		stop: stop, cancel: cancel, flush: context.WithoutCancel(stop), received: map[string]receipt{},
		taskAttrs: attrCache{url: o.QueueURL},
		dlqAttrs:  attrCache{url: o.DLQURL},
	}
	s.keep = newKeeper(s)
	return s
}

// Receive implements Source: one long poll for up to min(max, 10) messages.
// It checks ctx before calling, so no ReceiveMessage starts once ctx is
// done. When ctx ends during a poll, the poll is not aborted at once: SQS
// hands messages out the moment it answers, and the SDK drops an answer
// whose context is cancelled while it is read, so an answer already on the
// wire (or a request still in transit that SQS will answer at once) would
// leave its messages in flight, unseen, until their visibility lapsed. The
// poll gets ReceiveGrace to begin answering and, once its first byte has
// arrived, up to answerReadLimit to be read; an idle long poll is aborted
// after the grace. An answer so taken is returned (with a nil error) even
// though ctx has ended; the caller must take the messages. Close aborts a
// poll at once.
func (s *SQS) Receive(ctx context.Context, n int) ([]*Message, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n = min(maxSQSBatch, max(1, n))
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopWatch := context.AfterFunc(s.stop, cancel) //nolint:contextcheck // Close aborts the poll as well as ctx
	defer stopWatch()
	var answering atomic.Bool  // the current attempt's answer has begun
	var firstByte atomic.Int64 // when, in Unix nanoseconds
	pctx = httptrace.WithClientTrace(pctx, &httptrace.ClientTrace{
		GetConn: func(string) { answering.Store(false) }, // each SDK attempt
		GotFirstResponseByte: func() {
			firstByte.Store(s.o.Clock.Now().UnixNano())
			answering.Store(true)
		},
	})
	var g graceTimer
	graceWatch := context.AfterFunc(ctx, func() {
		g.after(s.o.ReceiveGrace, func() {
			begun := answering.Load()
			s.o.OnGraceDecided(begun)
			if begun {
				g.after(answerReadLimit, cancel)
				return
			}
			cancel()
		})
	})
	defer func() {
		graceWatch()
		g.stop()
	}()

	in := &sqs.ReceiveMessageInput{
		QueueUrl:            aws.String(s.o.QueueURL),
		MaxNumberOfMessages: int32(n),
		WaitTimeSeconds:     int32(s.o.WaitTime / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount,
			types.MessageSystemAttributeNameSentTimestamp,
			types.MessageSystemAttributeNameAWSTraceHeader,
		},
		MessageAttributeNames: []string{"All"},
	}
	if s.o.VisibilityTimeout > 0 {
		in.VisibilityTimeout = int32(ceilSeconds(s.o.VisibilityTimeout))
	}
	started := s.o.Clock.Now()
	out, err := s.c.ReceiveMessage(pctx, in)
	answered := s.o.Clock.Now()
	if at := firstByte.Load(); at != 0 {
		answered = time.Unix(0, at)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if s.isClosed() {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("queue: receive: %w", err)
	}
	msgs := make([]*Message, 0, len(out.Messages))
	s.mu.Lock()
	s.pruneLocked(started)
	for _, m := range out.Messages {
		msg := fromSQS(m)
		s.received[msg.Handle] = receipt{started: started, answered: answered}
		msgs = append(msgs, msg)
	}
	s.mu.Unlock()
	return msgs, nil
}

// graceTimer runs one pending func after a delay until stopped; a func
// scheduled after stop never runs.
type graceTimer struct {
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

func (g *graceTimer) after(d time.Duration, f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stopped {
		g.t = time.AfterFunc(d, f)
	}
}

func (g *graceTimer) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	if g.t != nil {
		g.t.Stop()
	}
}

// answerReadLimit bounds the reading of an answer that had begun when
// Receive's ctx ended.
const answerReadLimit = time.Second

func fromSQS(m types.Message) *Message {
	msg := &Message{
		ID:         aws.ToString(m.MessageId),
		Body:       []byte(aws.ToString(m.Body)),
		Handle:     aws.ToString(m.ReceiptHandle),
		Attributes: make(map[string]string, len(m.MessageAttributes)),
	}
	sys := m.Attributes
	if n, err := strconv.Atoi(sys[string(types.MessageSystemAttributeNameApproximateReceiveCount)]); err == nil {
		msg.ReceiveCount = n
	}
	if ms, err := strconv.ParseInt(sys[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		msg.SentAt = time.UnixMilli(ms)
	}
	msg.TraceHeader = sys[string(types.MessageSystemAttributeNameAWSTraceHeader)]
	for k, v := range m.MessageAttributes {
		if v.StringValue != nil {
			msg.Attributes[k] = *v.StringValue
		}
	}
	if id := msg.Attributes[OriginalIDAttribute]; id != "" {
		msg.ID = id
	}
	return msg
}

// pruneLocked forgets handles received more than 12 h ago: SQS no longer
// lets them be hidden. Handles are otherwise forgotten on Delete, DeadLetter
// and release (visibility 0).
// It scans at most once a minute.
func (s *SQS) pruneLocked(now time.Time) {
	if now.Sub(s.pruned) < time.Minute {
		return
	}
	s.pruned = now
	for h, r := range s.received {
		if now.Sub(r.started) > maxSQSVisibility {
			delete(s.received, h)
		}
	}
}

func (s *SQS) forget(handle string) {
	s.mu.Lock()
	delete(s.received, handle)
	s.mu.Unlock()
}

// clampLocked bounds a visibility change of the message received with
// handle to SQS's 12 hours in flight from its receive.
func (s *SQS) clampLocked(handle string, d time.Duration) time.Duration {
	d = min(max(d, 0), maxSQSVisibility)
	if r, ok := s.received[handle]; ok {
		// The receive request started no later than SQS's receive
		// time, so this never overshoots.
		if limit := maxSQSVisibility - s.o.Clock.Now().Sub(r.started); d > limit {
			d = max(0, limit.Truncate(time.Second)) // rounding up could pass the cap
		}
	}
	return d
}

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

func (s *SQS) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Delete implements Source and waits for its own entry's result. Deletes
// are group-committed: an idle source (no DeleteMessageBatch in flight,
// none returned within DeleteBatchWindow, and the last 10 deletes spread
// over more than DeleteBatchMaxWait) sends a delete at once; a busy one
// lets deletes gather until 10 are pending, for a window after the first
// of them, or until no other message received is left (not yet deleted,
// dead-lettered or released), whichever comes first. The window is
// DeleteBatchWindow, or DeleteBatchMaxWait when the last 10 deletes
// arrived within that: at tens of tasks a second a 10 ms window would
// send batches of a few. So
// an idle agent adds no latency, the last tasks of a burst (or of a
// drain) do not wait for a window, and a busy agent sends full batches,
// also when SQS answers much faster than its tasks end; no delete waits
// longer than max(DeleteBatchWindow, DeleteBatchMaxWait) for its batch
// to be sent. Entries failing with a server fault are retried
// DeleteRetries times; a sender fault (an invalid handle) is returned at
// once. If ctx ends first, Delete returns ctx.Err() and the batch still
// goes out.
func (s *SQS) Delete(ctx context.Context, m *Message) error {
	s.keep.unhold(m)
	p := &pendingDelete{handle: m.Handle, id: m.ID, done: make(chan error, 1)}
	s.mu.Lock()
	delete(s.received, m.Handle)
	s.pending = append(s.pending, p)
	now := time.Now()
	took := now.Sub(s.arrivals[s.arrival]) // since the 10th delete before this one
	s.arrivals[s.arrival] = now
	s.arrival = (s.arrival + 1) % len(s.arrivals)
	// Deletes arriving fast enough to fill a batch within
	// DeleteBatchMaxWait make the source busy too.
	fast := took <= s.o.DeleteBatchMaxWait
	idle := s.sending == 0 && s.timer == nil && now.Sub(s.returned) >= s.o.DeleteBatchWindow && !fast
	switch {
	case s.closed || idle || len(s.pending) >= maxSQSBatch || len(s.received) == 0:
		s.flushLocked()
	case s.timer == nil:
		window := s.o.DeleteBatchWindow
		if fast {
			// Not took: the next 10 arrive as irregularly as tasks end.
			window = max(window, s.o.DeleteBatchMaxWait)
		}
		s.timer = time.AfterFunc(window, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.timer = nil
			s.flushLocked()
		})
	}
	s.mu.Unlock()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PendingDeletes reports deletes waiting for their batch to be sent.
func (s *SQS) PendingDeletes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// flushLocked sends every pending delete, 10 per batch, each batch on its
// own goroutine; called with mu held.
func (s *SQS) flushLocked() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	for len(s.pending) > 0 {
		n := min(maxSQSBatch, len(s.pending))
		batch := s.pending[:n:n]
		s.pending = s.pending[n:]
		s.sending++
		s.flushes.Go(func() {
			s.deleteBatch(s.flush, batch)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.sending--
			s.returned = time.Now()
			// What gathered meanwhile stays for its timer or its tenth
			// entry: sent now, when SQS answers faster than tasks end,
			// it would go in batches of a few.
		})
	}
	s.pending = nil
}

// deleteBatch sends one DeleteMessageBatch and delivers each entry's result,
// retrying entries that failed with a server-side fault, within
// deleteFlushLimit.
func (s *SQS) deleteBatch(ctx context.Context, batch []*pendingDelete) {
	ctx, cancel := context.WithTimeout(ctx, deleteFlushLimit)
	defer cancel()
	for attempt := 0; len(batch) > 0; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(deleteRetryPause * time.Duration(attempt))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		entries := make([]types.DeleteMessageBatchRequestEntry, len(batch))
		for i, p := range batch {
			entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(p.handle)}
		}
		out, err := s.c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(s.o.QueueURL), Entries: entries})
		if err != nil {
			// The SDK retryer already retried throttling and 5xx.
			err = fmt.Errorf("queue: delete batch: %w", err)
			for _, p := range batch {
				s.log.Warn("delete failed", "message_id", p.id, "err", err)
				p.done <- err
			}
			return
		}
		for _, e := range out.Successful {
			if p := entryOf(batch, e.Id); p != nil {
				p.done <- nil
			}
		}
		var retry []*pendingDelete
		for _, f := range out.Failed {
			p := entryOf(batch, f.Id)
			if p == nil {
				continue
			}
			err := fmt.Errorf("queue: delete %s: %w", p.id, &BatchEntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault})
			if !f.SenderFault && attempt < s.o.DeleteRetries {
				retry = append(retry, p)
				continue
			}
			s.log.Warn("delete failed", "message_id", p.id, "err", err)
			p.done <- err
		}
		batch = retry
	}
}

func entryOf(batch []*pendingDelete, id *string) *pendingDelete {
	i, err := strconv.Atoi(aws.ToString(id))
	if err != nil || i < 0 || i >= len(batch) {
		return nil
	}
	return batch[i]
}

// BatchEntryError is one failed entry of an SQS batch call.
type BatchEntryError struct {
	Code        string
	Message     string
	SenderFault bool // the request was wrong (not retried); else SQS failed
}

func (e *BatchEntryError) Error() string {
	who := "server"
	if e.SenderFault {
		who = "sender"
	}
	return fmt.Sprintf("%s (%s fault): %s", e.Code, who, e.Message)
}

// ChangeVisibility implements Source. d is rounded up to whole seconds and
// clamped so the message's total time in flight stays within SQS's 12 hours
// from its receive (SQS rejects more); d == 0 releases it. It ends a Hold
// of m.
func (s *SQS) ChangeVisibility(ctx context.Context, m *Message, d time.Duration) error {
	s.keep.unhold(m)
	s.mu.Lock()
	d = s.clampLocked(m.Handle, d)
	if d == 0 {
		delete(s.received, m.Handle)
	}
	s.mu.Unlock()
	_, err := s.c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(s.o.QueueURL),
		ReceiptHandle:     aws.String(m.Handle),
		VisibilityTimeout: int32(ceilSeconds(d)),
	})
	if err != nil {
		return fmt.Errorf("queue: change visibility of %s to %v: %w", m.ID, d, err)
	}
	return nil
}

// Send implements Source.
func (s *SQS) Send(ctx context.Context, body []byte) (string, error) {
	if s.isClosed() {
		return "", ErrClosed
	}
	ctx, span := tracing.StartSend(ctx, tracing.SystemSQS, QueueName(s.o.QueueURL))
	defer span.End()
	in := &sqs.SendMessageInput{
		QueueUrl:    aws.String(s.o.QueueURL),
		MessageBody: aws.String(string(body)),
	}
	tracing.Inject(ctx, func(k, v string) {
		if in.MessageAttributes == nil {
			in.MessageAttributes = map[string]types.MessageAttributeValue{}
		}
		in.MessageAttributes[k] = stringAttr(v)
	})
	out, err := s.c.SendMessage(ctx, in)
	if err != nil {
		tracing.Fail(span, err)
		return "", fmt.Errorf("queue: send: %w", err)
	}
	tracing.Sent(span, aws.ToString(out.MessageId))
	return aws.ToString(out.MessageId), nil
}

// Close implements Source: it aborts long polls in progress, stops extending
// held messages, sends pending deletes at once and waits for them (or ctx).
// Deletes after Close are sent unbatched.
func (s *SQS) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.flushLocked()
	s.mu.Unlock()
	s.keep.close()
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.flushes.Wait()
		s.keep.wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("queue: close: pending deletes: %w", ctx.Err())
	}
}

// answeredAt is when the answer of the receive of the message with handle
// came, or def when unknown.
func (s *SQS) answeredAt(handle string, def time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.received[handle]; ok {
		return r.answered
	}
	return def
}

// receipt is when the receive of a message started (no later than SQS
// put it in flight: the bound of the 12 hours in flight) and when its
// answer began to arrive (a long poll may wait up to its wait time for
// the message, so the visibility that the keeper extends counts from
// here; the answer's time in transit is far below the two thirds of the
// timeout the keeper leaves before it lapses).
type receipt struct{ started, answered time.Time }

// QueueName is the name of the queue at url (its last path segment), the
// messaging.destination.name of its spans.
func QueueName(url string) string {
	if i := strings.LastIndexByte(url, '/'); i >= 0 {
		return url[i+1:]
	}
	return url
}
