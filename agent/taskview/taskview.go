// Package taskview is the one view of a task that leaves the agent: the
// record as GET /v1/tasks/{id}, `autodiag show`, notification events and
// reports' events carry it. Its JSON is the README's contract. The stored
// record (state.TaskRecord) makes it (TaskRecord.View); the message that
// asks for a task is task.Task.
//
// It imports nothing of autodiag, so that state, notify, report and the
// commands can all use it.
package taskview

import (
	"encoding/json"
	"time"
)

// Task is a task as GET /v1/tasks/{id} and `autodiag show --json` show
// it; a notification event carries it with the output cut to an excerpt
// (notify.Excerpt), a report's event with the report. state.TaskRecord.View
// makes one from a stored record.
//
// It is also the one list of a task's fields: state.TaskRecord is a Task
// as stored (the same fields, its own JSON encoding of a few), so a field
// added here is stored and shown alike. The tags are the view's: its JSON
// is the contract (agent/hooks/testdata pins it).
type Task struct {
	ID   string `json:"id"`
	Host string `json:"host"`
	// HostAsSent is the host as the task named it when Host is the
	// machine's canonical name for another of its names; "" otherwise.
	HostAsSent string            `json:"host_as_sent,omitempty"`
	Diagnostic string            `json:"diagnostic"`
	Params     map[string]string `json:"params,omitempty"`
	Severity   string            `json:"severity,omitempty"`
	Alert      *Alert            `json:"alert,omitempty"`
	// Origin, Parent, Investigation and Step place an investigation's
	// tool call in its tree; empty for other tasks.
	Origin        string `json:"origin,omitempty"`
	Parent        string `json:"parent,omitempty"`
	Investigation string `json:"investigation,omitempty"`
	Step          int    `json:"step,omitempty"`
	Status        string `json:"status,omitempty"`
	Outcome       string `json:"outcome"`
	Reason        string `json:"reason,omitempty"`
	Attempts      int    `json:"attempts"`
	Owner         string `json:"owner,omitempty"`
	// The times are absent when unset; the view shows them in UTC, the
	// record as they were taken.
	ReceivedAt time.Time `json:"received_at,omitzero"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// ExitCode is the diagnostic's exit status, -1 when it did not start;
	// nil in a record that never had one. The view shows it only when the
	// diagnostic ran (outcome.Ran).
	ExitCode *int   `json:"exit_code,omitempty"`
	Output   string `json:"output"`
	// Truncated: Output was cut to the record's bound.
	Truncated bool `json:"truncated"`
	// OutputURL is where the whole (redacted) output was uploaded; empty
	// when it was not.
	OutputURL string `json:"output_url,omitempty"`
	// OutputUpload is "failed" when the upload to results.s3 failed.
	OutputUpload string `json:"output_upload,omitempty"`
	// Limiter is the limiter's decision summary (rule, limit, counters)
	// of a denied task, as JSON the agent shapes.
	Limiter json.RawMessage `json:"limiter,omitempty"`
	// Report is the root-cause report, as JSON; empty until one is made
	// (the view shows null).
	Report json.RawMessage `json:"report"`
	// TraceID is the task's trace (its process span's) when tracing is
	// on; SpanID that span's id when the trace is sampled, the parent of
	// the notification and report spans (see docs/tracing.md). TraceURL
	// is tracing.link_template filled with the trace id: the view's only,
	// made by View, never stored.
	TraceID  string `json:"trace_id,omitempty"`
	SpanID   string `json:"span_id,omitempty"`
	TraceURL string `json:"trace_url,omitempty"`

	// RanOn is the agent that ran the diagnostic; nil for a task that
	// never ran (rate_limited, rejected, duplicate, stale, or not yet).
	RanOn *RanOn `json:"ran_on,omitempty"`

	// Approval is the person's decision on a task whose diagnostic needs
	// one (catalog `approval: required`); nil for other tasks.
	Approval *Approval `json:"approval,omitempty"`
}

// StatusAwaitingApproval is the status of a task parked for a person's
// approval: recorded, holding no worker and no concurrency slot.
const StatusAwaitingApproval = "awaiting_approval"

// The decisions of an Approval.
const (
	ApprovalApproved = "approved"
	ApprovalDenied   = "denied"
	ApprovalTimeout  = "timeout"
)

// Approval is what was asked and decided for a task whose diagnostic
// needs a person's approval: when it was asked, by when it must be
// answered, and who decided what, when, why and via what (api, cli or
// slack); Decision is empty while it waits.
type Approval struct {
	RequestedAt time.Time  `json:"requested_at"`
	Deadline    time.Time  `json:"deadline"`
	Decision    string     `json:"decision,omitempty"`
	By          string     `json:"by,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Via         string     `json:"via,omitempty"`
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
}

// Approved reports whether a person approved the task.
func (a *Approval) Approved() bool { return a != nil && a.Decision == ApprovalApproved }

// RanOn names the agent that ran a task's diagnostic, as that agent
// knows itself: the machine a host-local diagnostic's output describes.
type RanOn struct {
	InstanceID string `json:"instance_id"`
	Hostname   string `json:"hostname"`
}

// String is "i-0abc (ip-10-0-1-5)", or the instance id alone when the
// hostname is unknown or the same; "" for nil.
func (r *RanOn) String() string {
	switch {
	case r == nil:
		return ""
	case r.Hostname == "" || r.Hostname == r.InstanceID:
		return r.InstanceID
	}
	return r.InstanceID + " (" + r.Hostname + ")"
}

// Alert is the alert a task came from.
type Alert struct {
	Source  string `json:"source,omitempty"`
	Name    string `json:"name,omitempty"`
	EventID string `json:"event_id,omitempty"`
	// Labels, Annotations, StartsAt and Route are the alert's context
	// (bounded, redacted); Investigate "always" is the route's ask for a
	// report whatever the outcome.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	StartsAt    time.Time         `json:"starts_at,omitzero"`
	Route       string            `json:"route,omitempty"`
	Investigate string            `json:"investigate,omitempty"`
	// Refs name the alert in the systems a write-back sink writes to.
	Refs AlertRefs `json:"refs,omitzero"`
}

// IsZero reports whether a says nothing.
func (a Alert) IsZero() bool {
	return a.Source == "" && a.Name == "" && a.EventID == "" && len(a.Labels) == 0 && len(a.Annotations) == 0 &&
		a.StartsAt.IsZero() && a.Route == "" && a.Investigate == "" && a.Refs == (AlertRefs{})
}

// AlertRefs name an alert in the systems autodiag writes back to, read
// at routing from the alert's annotations or labels of the same names
// (an annotation wins): what a write-back sink needs beyond the source's
// own event id. Empty fields are unknown.
type AlertRefs struct {
	// PagerDutyIncidentID is the incident's id (P…): notes go to it.
	PagerDutyIncidentID string `json:"pagerduty_incident_id,omitempty"`
	// PagerDutyIncidentKey is the incident key (the Events API dedup_key)
	// the incident is looked up by when its id is not known.
	PagerDutyIncidentKey string `json:"pagerduty_incident_key,omitempty"`
	// OpsgenieAlias is the Opsgenie alert's alias.
	OpsgenieAlias string `json:"opsgenie_alias,omitempty"`
	// ZabbixEventID is the Zabbix problem event of an alert that did not
	// come from Zabbix (one from Zabbix names it in event_id).
	ZabbixEventID string `json:"zabbix_event_id,omitempty"`
}

// RefNames are the annotation and label names AlertRefs are read from,
// in the order of its fields.
var RefNames = []string{"pagerduty_incident_id", "pagerduty_incident_key", "opsgenie_alias", "zabbix_event_id"}

// Set sets the field named name (one of RefNames) to v; it reports
// whether name is one.
func (r *AlertRefs) Set(name, v string) bool {
	switch name {
	case "pagerduty_incident_id":
		r.PagerDutyIncidentID = v
	case "pagerduty_incident_key":
		r.PagerDutyIncidentKey = v
	case "opsgenie_alias":
		r.OpsgenieAlias = v
	case "zabbix_event_id":
		r.ZabbixEventID = v
	default:
		return false
	}
	return true
}

// Values are the fields in the order of RefNames.
func (r AlertRefs) Values() []string {
	return []string{r.PagerDutyIncidentID, r.PagerDutyIncidentKey, r.OpsgenieAlias, r.ZabbixEventID}
}
