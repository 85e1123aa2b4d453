// Package state keeps what the fleet must remember about tasks so that a
// crash, a restart or a duplicate delivery never loses or doubles work:
// execution leases, task records, per-instance in-flight sets, instance
// records, persisted drain state and a capped audit stream. Each concern
// is a store of its own over one backend (leases.go, records.go, audit.go,
// presence.go, handoff.go): NewMemory builds them for embedded mode (one
// agent), NewRedis over one client for a fleet.
package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/taskview"
)

// ErrLeaseLost is returned by Renew when the lease is no longer ours (it
// expired and another agent took it, or the task finished).
var ErrLeaseLost = errors.New("state: lease lost")

// ErrSuperseded is returned by Finish when a later attempt owns the task's
// record: this owner's lease lapsed while it ran and another agent claimed
// the task. The later attempt's record stands; nothing was written.
var ErrSuperseded = errors.New("state: record belongs to a later attempt")

// ErrPartial is returned by Finish when the record is written but its
// audit entry could not be (a cluster writes them in two round trips):
// the record must not be finished again, the loss is only logged.
var ErrPartial = errors.New("state: record written, audit entry not")

// Task statuses stored in TaskRecord.Status.
const (
	StatusRunning     = "running"
	StatusDone        = "done"
	StatusInterrupted = "interrupted"
)

// TaskRecord is the durable record of one task id (autodiag:task:<id>):
// a taskview.Task as stored, so the fields are listed once, there. Its
// JSON (MarshalJSON) is the view's but for the report, left out while
// there is none; View makes the view from it. A record written before a
// field existed reads with it empty; TraceURL is the view's and stays
// empty in a record.
type TaskRecord taskview.Task

// MarshalJSON writes the stored form. An absent report is left out, not
// written as null: null would read back, here and in agents of earlier
// versions, as a report of four bytes. (Before the fields were folded
// into taskview.Task the record also left out an empty host, diagnostic,
// outcome, output, truncated and exit code and kept an empty status; each
// reads back as the same value either way, in this version and earlier
// ones; TestRecordAcrossVersions pins both directions.)
func (r TaskRecord) MarshalJSON() ([]byte, error) {
	type stored struct {
		taskview.Task
		// Report is at depth 0, so encoding/json takes it over the
		// Task's.
		Report json.RawMessage `json:"report,omitempty"`
	}
	return json.Marshal(stored{Task: taskview.Task(r), Report: r.Report})
}

// FinishExtras are the writes that belong to a task's end besides its
// record, made by Finish in the same call: one round trip to a standalone
// Redis, atomically with the record. A Finish that fails writes none of
// them, so a caller that keeps the record to finish it later keeps its
// extras with it.
type FinishExtras struct {
	// ID names this finish, the same on every try of it, so that a retry
	// of a Finish whose reply was lost (it wrote everything) writes
	// nothing twice; "" makes no such check. NewFinishID makes one.
	ID string
	// Audit is the run's audit entry, written whether or not the record
	// is (a superseded run still ends in its own outcome); nil = none.
	Audit *AuditEntry
	// Writes are made only when the record is written: not on
	// ErrSuperseded, as the later attempt that owns the record makes its
	// own (the outbox event of its outcome, its report job).
	Writes []Write
	// Calls are script calls of another component on the same Redis
	// (the limiter giving back a run's slots), sent ahead of the record in
	// its round trip, whatever the record's fate; a store without Redis
	// calls each one's Fallback instead. They go with the first try of a
	// finish only: whoever keeps a finish to try again drops them (a
	// second send would count twice what they count).
	Calls []Call
}

// Call is one script call that rides in a finish's round trip.
type Call struct {
	Script *redis.Script
	// Source is Script's Lua source, when the caller gives it: where one
	// node holds every key (a standalone server) the finish then runs the
	// call inside its own script, one EVALSHA for both, instead of
	// sending it ahead as an EVALSHA of its own. Empty = sent ahead.
	Source string
	Keys   []string
	Args   []any
	// Fallback makes the call on its own: what a store without Redis
	// does. Required.
	Fallback func(ctx context.Context)
	// Done, when set, is told the call's error (nil: it ran).
	Done func(err error)
}

// Write is one write that goes with a task's final record, in the shape
// of each store: the state package knows nothing of what it carries.
type Write struct {
	// Stream is the write as one XADD, which a Redis store makes in the
	// round trip of the record; nil = the store calls Apply after it.
	Stream *redis.XAddArgs
	// Apply makes the write on its own, logging its own failure: what a
	// store without Redis does, and a Redis store without Stream, or
	// when the XADD failed on its own. Required.
	Apply func(ctx context.Context)
	// Done, when set, is told the Stream write landed, with the stream
	// entry's id (Apply does its own follow-up).
	Done func(id string)
}

// NewFinishID returns a random FinishExtras.ID.
func NewFinishID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ClaimResult says what Claim found.
type ClaimResult int

const (
	// Claimed: the lease is ours; run the task.
	Claimed ClaimResult = iota
	// HeldElsewhere: another owner holds a live lease; the task is running
	// there. Hide the message for LeaseRemaining and look again later.
	HeldElsewhere
	// AlreadyDone: the task finished earlier; acknowledge without running.
	AlreadyDone
)

func (r ClaimResult) String() string {
	switch r {
	case Claimed:
		return "claimed"
	case HeldElsewhere:
		return "held_elsewhere"
	case AlreadyDone:
		return "already_done"
	}
	return "unknown"
}

// Claim is the answer of Store.Claim.
type Claim struct {
	Result         ClaimResult
	Record         TaskRecord    // the record after the claim (attempts counted), or the finished one
	LeaseRemaining time.Duration // with HeldElsewhere
}

// AuditEntry is one line of the capped audit stream (autodiag:audit).
type AuditEntry struct {
	Time       time.Time         `json:"time"`
	InstanceID string            `json:"instance_id"`
	TaskID     string            `json:"task_id"`
	Host       string            `json:"host,omitempty"`
	Diagnostic string            `json:"diagnostic,omitempty"`
	Outcome    string            `json:"outcome"`
	Reason     string            `json:"reason,omitempty"`
	Fields     map[string]string `json:"fields,omitempty"` // e.g. rule, limit, retry_after for denials
}

// Instance is one agent's record (autodiag:instance:<id>), refreshed with a
// TTL while the agent lives so that a vanished agent shows as gone.
type Instance struct {
	ID        string    `json:"id"`
	State     string    `json:"state"` // running | draining | drained
	StartedAt time.Time `json:"started_at"`
	Version   string    `json:"version"`
	Inflight  int       `json:"inflight"`
	SeenAt    time.Time `json:"seen_at"`
	// ASG and AZ place the instance (empty when unknown); with
	// RedisOptions.InService they decide which in-service indexes it is in.
	ASG string `json:"asg,omitempty"`
	AZ  string `json:"az,omitempty"`
	// Names are the host names the agent answers for (instance id,
	// hostname, private DNS name and addresses, host_names), normalised
	// as task hosts are, the canonical one first; a host-local diagnostic
	// of one of them runs on this agent.
	Names []string `json:"names,omitempty"`
}

// InstanceInService is the Instance.State of an agent taking work: the
// one state counted in the in-service indexes.
const InstanceInService = "running"

// StateGone is the state Instances reports for an agent whose heartbeat
// lapsed; GoneKeep is how long such an agent is still listed.
const (
	StateGone = "gone"
	GoneKeep  = time.Hour
)

// InflightEntry is one task an instance is running.
type InflightEntry struct {
	TaskID     string    `json:"task_id"`
	Host       string    `json:"host"`
	Diagnostic string    `json:"diagnostic"`
	StartedAt  time.Time `json:"started_at"`
}

// DrainRecord is the drain state persisted per instance so an agent
// restarted mid-drain resumes heartbeating and completes the lifecycle
// action instead of taking new work. Action is the lifecycle action as JSON
// (opaque to this package).
type DrainRecord struct {
	Reason    string    `json:"reason"`
	Source    string    `json:"source"`
	StartedAt time.Time `json:"started_at"`
	Deadline  time.Time `json:"deadline"`
	Action    []byte    `json:"action,omitempty"`
	Completed bool      `json:"completed"`
}

// LeaseStore takes and gives back the execution leases of tasks: what
// makes a redelivered or duplicate message run at most once. A claim
// writes the task's record as running with its lease.
type LeaseStore interface {
	// Claim takes the execution lease of rec.ID for owner (for lease), or
	// reports that another owner holds it or that the task already ended.
	// On Claimed the record is written as running with Attempts+1 and the
	// task enters owner's in-flight set.
	Claim(ctx context.Context, rec TaskRecord, owner string, lease time.Duration) (Claim, error)
	// ClaimThen is Claim with then's script run in the claim's, right
	// after the lease is taken: one round trip for both. folded is false,
	// and nothing is done, where one script cannot reach every key (a
	// Cluster, a Ring, memory): make the two calls then.
	ClaimThen(ctx context.Context, rec TaskRecord, owner string, lease time.Duration, then Then) (c Claim, reply any, folded bool, err error)
	// Renew extends owner's lease; ErrLeaseLost when it is not owner's.
	Renew(ctx context.Context, taskID, owner string, lease time.Duration) error
	// Release gives the lease back without ending the task (released,
	// deferred): the next delivery runs it.
	Release(ctx context.Context, taskID, owner string) error
	// Recover marks owner's in-flight tasks interrupted and drops their
	// leases, for an agent restarting on the same instance; it returns them.
	Recover(ctx context.Context, owner string) ([]TaskRecord, error)
	// InflightIDs lists the task ids of instanceID's in-flight entries as
	// they are, including those of tasks that ended (a crash between a
	// claim and its entry on a cluster leaves such); a store that derives
	// its entries from the records lists those.
	InflightIDs(ctx context.Context, instanceID string) ([]string, error)
}

// TaskStore keeps task records: their end, written once, and their
// reads.
type TaskStore interface {
	// Finish records the task's outcome as done (kept for the record TTL),
	// drops the lease and the in-flight entry, and makes x's writes with
	// it (see FinishExtras). It never overwrites a later attempt: when the
	// stored record has more attempts than rec.Attempts (or, with
	// rec.Attempts 0, runs under another owner), it drops only rec.Owner's
	// in-flight entry, writes only x.Audit and returns ErrSuperseded.
	Finish(ctx context.Context, rec TaskRecord, x FinishExtras) error
	// Task returns a task record, ok=false when none.
	Task(ctx context.Context, id string) (TaskRecord, bool, error)
	// SetReport writes a root-cause report (JSON) into the record of id,
	// keeping the rest of the record and its TTL; ok=false when there is
	// no record.
	SetReport(ctx context.Context, id string, report json.RawMessage) (ok bool, err error)
}

// AuditLog is the capped stream of task outcomes and deferrals.
type AuditLog interface {
	// Audit appends e to the capped audit stream.
	Audit(ctx context.Context, e AuditEntry) error
	// RecentAudit returns the newest n audit entries, newest first.
	RecentAudit(ctx context.Context, n int) ([]AuditEntry, error)
}

// InstanceStore keeps each agent's record and shows what it runs: the
// fleet view of `autodiag status`.
type InstanceStore interface {
	// PutInstance writes inst with ttl.
	PutInstance(ctx context.Context, inst Instance, ttl time.Duration) error
	// Instances lists instance records, by id: live ones with their
	// state, and those whose heartbeat lapsed within the last GoneKeep as
	// state "gone", so a vanished agent stays visible for a while.
	Instances(ctx context.Context) ([]Instance, error)
	// Inflight lists the tasks instanceID is running.
	Inflight(ctx context.Context, instanceID string) ([]InflightEntry, error)
	// Ping reports whether the backing store answers (redis_up).
	Ping(ctx context.Context) error
}

// DrainStore persists an instance's drain so a restart resumes it.
type DrainStore interface {
	// SaveDrain persists instanceID's drain state (with a TTL past its deadline).
	SaveDrain(ctx context.Context, instanceID string, d DrainRecord) error
	// LoadDrain returns instanceID's drain state, nil when none.
	LoadDrain(ctx context.Context, instanceID string) (*DrainRecord, error)
}

// Marks remembers that something happened once, for a while: a rejected
// message's outcome is written on its first delivery only, however often
// the queue hands it out again.
type Marks interface {
	// MarkOnce sets key for ttl unless it is set already; first reports
	// whether this call set it.
	MarkOnce(ctx context.Context, key string, ttl time.Duration) (first bool, err error)
}

// Presence is what the fleet knows of each agent: its record and what it
// runs, its host names and its persisted drain.
type Presence interface {
	InstanceStore
	DrainStore
	HostNames
	// HostClaims returns, for each of names, the live agents that claim
	// it (at most 3 each, sorted).
	HostClaims(ctx context.Context, names []string) (map[string][]string, error)
}

// Store is the agent's state: one store per concern, all over one backend
// (a Redis client shared by them, or memory in embedded mode), built by
// NewRedis or NewMemory. Every key they write has a TTL or a bound; each
// is safe for concurrent use. Consumers take the role they use, not the
// Store.
type Store struct {
	LeaseStore
	TaskStore
	AuditLog
	Presence
	Marks
	// Handoff carries lifecycle notices and task messages from one agent
	// to another; nil without Redis (one agent alone).
	Handoff *RedisHandoff

	close func() error
}

// Close releases what the stores hold of their own (not the client).
func (s Store) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}
