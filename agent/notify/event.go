package notify

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/outcome"
)

// EventType names what happened; sinks subscribe to types with `on`.
type EventType string

// The events a sink can subscribe to: the task outcomes worth telling a
// person about, a finished root-cause report, and the drain's milestones.
const (
	EventSucceeded   EventType = outcome.Succeeded
	EventFailed      EventType = outcome.Failed
	EventTimedOut    EventType = outcome.TimedOut
	EventRateLimited EventType = outcome.RateLimited
	EventReport      EventType = "report"
	// EventResolved: the alert a task came from resolved (its source said
	// so); one per alert, carrying its task with the report.
	EventResolved       EventType = "resolved"
	EventDrainStarted   EventType = "drain_started"
	EventDrainCompleted EventType = "drain_completed"
	EventDrainFailed    EventType = "drain_failed"
	// EventApprovalRequested: a task of a diagnostic with approval:
	// required was parked; its task (status awaiting_approval) carries
	// the approval's deadline. Slack renders approve/deny buttons for it.
	EventApprovalRequested EventType = "approval_requested"
	// EventDenied: such a task ended denied (reason approval_denied or
	// approval_timeout); its task names who decided.
	EventDenied EventType = outcome.Denied
)

// EventTypes are all event types, in the order the README lists them.
var EventTypes = []EventType{EventSucceeded, EventFailed, EventTimedOut, EventRateLimited,
	EventReport, EventDrainStarted, EventDrainCompleted, EventDrainFailed, EventResolved, EventApprovalRequested, EventDenied}

// drain says whether t is one of the drain's events, which carry no task.
func (t EventType) drain() bool {
	return t == EventDrainStarted || t == EventDrainCompleted || t == EventDrainFailed
}

func (t EventType) valid() bool {
	for _, e := range EventTypes {
		if t == e {
			return true
		}
	}
	return false
}

// MaxOutputExcerpt bounds the task output an event carries: a person
// reads the head and the tail; the whole output is in the record.
const MaxOutputExcerpt = 16 << 10

// Event is one notification, exactly as a webhook receives it.
type Event struct {
	Type EventType `json:"event"`
	// ID is the delivery id: set by Enqueue when empty, stable across
	// retries, the same for every sink.
	ID         string         `json:"delivery_id"`
	InstanceID string         `json:"instance_id"`
	Time       time.Time      `json:"time"`
	Task       *taskview.Task `json:"task,omitempty"`
	Drain      *Drain         `json:"drain,omitempty"`
}

// Drain describes a drain for the drain_* events.
type Drain struct {
	Source    string     `json:"source"`
	Reason    string     `json:"reason,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	Deadline  time.Time  `json:"deadline"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// Result is the lifecycle completion (CONTINUE, ABANDON) or why the
	// drain failed (deadline, completion_failed).
	Result    string `json:"result,omitempty"`
	Released  int    `json:"released,omitempty"`
	Cancelled int    `json:"cancelled,omitempty"`
	TimedOut  bool   `json:"timed_out,omitempty"`
}

// NewID is a random delivery id (128 bits, hex).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Excerpt cuts s to at most max bytes: the first and the last lines, and
// between them a line saying how much was cut and, when show is set, where
// the whole is (an `autodiag show ID` command or an output URL). Cuts fall
// on line ends where a line end is near, and never inside a UTF-8
// sequence.
func Excerpt(s string, max int, show string) string {
	if len(s) <= max {
		return s
	}
	marker := func(cut int) string {
		m := fmt.Sprintf("\n… %d bytes cut …\n", cut)
		if show != "" {
			m = fmt.Sprintf("\n… %d bytes cut; the whole output: %s …\n", cut, show)
		}
		return m
	}
	room := max - len(marker(len(s)))
	if room <= 0 {
		return utf8cut.Head(marker(len(s))[1:], max)
	}
	headLen := room / 2
	head := utf8cut.Head(s, headLen)
	if i := strings.LastIndexByte(head, '\n'); i >= headLen/2 {
		head = head[:i+1]
	}
	tailLen := room - len(head)
	tail := s[len(s)-tailLen:]
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i < tailLen/2 {
		tail = tail[i+1:]
	}
	// A tail that starts inside a rune starts at the rune after it.
	tail = utf8cut.Tail(tail, len(tail))
	return strings.TrimSuffix(head, "\n") + marker(len(s)-len(head)-len(tail)) + tail
}
