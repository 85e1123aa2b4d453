package sqsfake

import (
	"context"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Call is one request as the server saw it.
type Call struct {
	Seq          int
	Time         time.Time // when the request arrived (server clock)
	Op           string
	Queue        string
	InvocationID string // amz-sdk-invocation-id: the same for every retry of one SDK call
	Attempt      int    // from amz-sdk-request (1 = first attempt), 0 if absent
	Status       int    // HTTP status sent; 0 when the response was dropped
	ErrorCode    string // query error code of a failed call
	Faults       []FaultKind
	// N is the number of messages sent, returned, deleted-or-acknowledged,
	// purged or changed, or batch entries, depending on Op.
	N              int
	Failed         int           // failed batch entries
	MessageIDs     []string      // sent, received or actually deleted
	ReceiptHandles []string      // returned by ReceiveMessage or passed to Delete/ChangeVisibility
	StaleDeletes   int           // deletes that succeeded without deleting (stale handle)
	Wait           time.Duration // long-poll wait of ReceiveMessage
}

func (s *Server) record(call *Call, status int, code string) {
	call.Status = status
	call.ErrorCode = code
	s.logMu.Lock()
	defer s.logMu.Unlock()
	s.seq++
	call.Seq = s.seq
	s.counters[call.Op]++
	if s.logLimit > 0 {
		if len(s.calls) >= 2*s.logLimit {
			n := copy(s.calls, s.calls[len(s.calls)-s.logLimit:])
			clear(s.calls[n:])
			s.calls = s.calls[:n]
		}
		s.calls = append(s.calls, *call)
	}
}

// Calls returns the call log, oldest first (at most the last call-log-limit
// entries), optionally only the given operations.
func (s *Server) Calls(ops ...string) []Call {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	start := 0
	if s.logLimit > 0 && len(s.calls) > s.logLimit {
		start = len(s.calls) - s.logLimit
	}
	out := []Call{}
	for _, c := range s.calls[start:] {
		if len(ops) == 0 || contains(ops, c.Op) {
			out = append(out, c)
		}
	}
	return out
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// Counters returns the number of requests per operation, including failed,
// faulted and retried ones.
func (s *Server) Counters() map[string]int {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	out := make(map[string]int, len(s.counters))
	for k, v := range s.counters {
		out[k] = v
	}
	return out
}

// ResetLog clears the call log and the counters.
func (s *Server) ResetLog() {
	s.logMu.Lock()
	s.calls, s.counters = nil, map[string]int{}
	s.logMu.Unlock()
}

// QueueStats counts what happened to a queue's messages.
type QueueStats struct {
	Sent         int // accepted by SendMessage(Batch)
	Received     int // deliveries (a message received twice counts twice)
	Deleted      int // actually deleted by DeleteMessage(Batch)
	StaleDeletes int // deletes with a stale handle: succeeded, deleted nothing
	Expired      int // dropped after MessageRetentionPeriod
	Purged       int
	MovedToDLQ   int // moved out to the dead-letter queue
	MovedIn      int // moved in from a source queue (this queue is a DLQ)
}

// MessageView is one message of a queue, or the history of a gone one.
type MessageView struct {
	ID           string
	Body         string // empty for gone messages
	State        string // visible, inflight, delayed, or for a gone message its fate: deleted, expired, purged, moved
	ReceiveCount int
	SentAt       time.Time
	VisibleAt    time.Time // when an in-flight or delayed message becomes visible
	Attributes   map[string]MessageAttribute
}

// QueueView is a snapshot of a queue, settled at the clock's current time.
type QueueView struct {
	Name, URL, ARN              string
	Visible, InFlight, Delayed  int
	Messages                    []MessageView // live messages, by SentAt
	History                     []MessageView // every message ever sent to (or moved into) the queue, by ID
	Stats                       QueueStats
	VisibilityTimeout, WaitTime time.Duration
}

// Empty reports whether no message is left in any state: every message was
// deleted (or expired, purged, moved).
func (v QueueView) Empty() bool { return v.Visible == 0 && v.InFlight == 0 && v.Delayed == 0 }

// Queue returns a snapshot of the named queue.
func (s *Server) Queue(name string) (QueueView, bool) {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, ok := s.queues[name]
	if !ok {
		return QueueView{}, false
	}
	q.settle(s.clock.Now())
	v := QueueView{
		Name: q.name, URL: s.baseURL + "/" + s.account + "/" + q.name, ARN: q.arn,
		Visible: q.nVisible, InFlight: q.nInflight, Delayed: q.nDelayed, Stats: q.stats,
		VisibilityTimeout: q.visibility(), WaitTime: seconds(q.attrs.wait),
	}
	for _, m := range q.msgs {
		mv := MessageView{ID: m.id, Body: m.body, State: m.state.String(), ReceiveCount: m.receiveCount,
			SentAt: m.sentAt, Attributes: m.attrs}
		if m.state != stateVisible {
			mv.VisibleAt = m.visibleAt
		}
		v.Messages = append(v.Messages, mv)
	}
	sort.Slice(v.Messages, func(i, j int) bool { return v.Messages[i].SentAt.Before(v.Messages[j].SentAt) })
	for _, id := range sortedKeys(q.hist) {
		h := q.hist[id]
		mv := MessageView{ID: id, ReceiveCount: h.ReceiveCount, State: h.Fate}
		if m, ok := q.msgs[id]; ok {
			mv.State, mv.Body, mv.SentAt = m.state.String(), m.body, m.sentAt
		}
		v.History = append(v.History, mv)
	}
	return v, true
}

// Stats returns the counts of the named queue without building a full view.
func (s *Server) Stats(name string) (visible, inFlight, delayed int, st QueueStats, ok bool) {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, ok := s.queues[name]
	if !ok {
		return 0, 0, 0, QueueStats{}, false
	}
	q.settle(s.clock.Now())
	return q.nVisible, q.nInFlightCount(), q.nDelayed, q.stats, true
}

func (q *queue) nInFlightCount() int { return q.nInflight }

// NewTestServer starts a new Server with opts on an
// httptest server, points queue URLs at it and closes it when tb ends.
func NewTestServer(tb testing.TB, opts ...Option) (*Server, *httptest.Server) {
	tb.Helper()
	s := New(opts...)
	ts := httptest.NewServer(s)
	s.SetBaseURL(ts.URL)
	tb.Cleanup(func() {
		s.Close()
		ts.Close()
	})
	return s, ts
}

// SDKConfig returns an aws.Config for an SDK client of the fake at endpoint
// (region us-east-1, static dummy credentials).
func SDKConfig(endpoint string) aws.Config {
	return aws.Config{
		Region: DefaultRegion,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDSQSFAKE", SecretAccessKey: "SECRET", Source: "sqsfake"}, nil
		}),
		BaseEndpoint: aws.String(endpoint),
	}
}

// Pollers reports how many ReceiveMessage long polls are blocked on the named
// queue, so tests can wait until a consumer is polling before acting.
func (s *Server) Pollers(name string) int {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	if q, ok := s.queues[name]; ok {
		return q.waiters
	}
	return 0
}

func (s *Server) isClosed() bool {
	select {
	case <-s.closed:
		return true
	default:
		return false
	}
}
