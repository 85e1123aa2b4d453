package alert

import (
	"strings"
	"time"
)

// Sources: the endpoint or queue shape an alert came through. Received.Source
// holds one of these, except for the generic endpoint, whose sender may
// name its own source.
const (
	SourceAlertmanager = "alertmanager"
	SourceZabbix       = "zabbix"
	SourceCloudWatch   = "cloudwatch"
	SourceGeneric      = "generic"
)

// Sources lists the sources in a stable order: the values of the source
// label of the alert metrics.
func Sources() []string {
	return []string{SourceAlertmanager, SourceZabbix, SourceCloudWatch, SourceGeneric}
}

// Values of Received.Status.
const (
	StatusFiring   = "firing"
	StatusResolved = "resolved"
)

// Received is one alert as its source sent it, normalised: the data
// route templates see. It is not the task's alert (taskview.Alert), which
// a route makes from it.
type Received struct {
	// Source is the alerting system: alertmanager, zabbix, cloudwatch, or
	// what a generic sender calls itself.
	Source string
	// Name is the alert name: Alertmanager's alertname label, Zabbix's
	// event name, the CloudWatch alarm name.
	Name string
	// Host is the host the source names, if any (Zabbix host, generic
	// host); routes derive it from labels or dimensions otherwise.
	Host string
	// Severity is lower-case with spaces as '_' ("not_classified").
	Severity string
	// EventID identifies one occurrence of the alert, the same on every
	// resend, so the limiter's dedupe sees repeats.
	EventID string
	// Labels: Alertmanager labels, Zabbix event tags, CloudWatch metric
	// namespace, metric_name, region and account, generic labels.
	Labels map[string]string
	// Annotations: Alertmanager annotations; Zabbix host_ip, trigger_id;
	// CloudWatch description and reason.
	Annotations map[string]string
	// Dimensions: the CloudWatch alarm's metric dimensions (InstanceId,
	// AutoScalingGroupName, …); empty for the other sources.
	Dimensions map[string]string
	// StartsAt is when the alert began (zero when the source does not say).
	StartsAt time.Time
	// Status is firing or resolved.
	Status string
}

// Item is one alert of a payload with its position in it, so an answer
// can say which alert of a batch ended how.
type Item struct {
	Index int
	Alert Received
}

// Outcome is how one alert of a payload ended short of becoming tasks.
type Outcome struct {
	Index  int    `json:"index"`
	Reason string `json:"reason"`
	// Detail is for people and log lines, not part of the HTTP answer.
	Detail string `json:"-"`
}

// Payload is what a decoder made of one body: the alerts to route, and
// the items it ended itself.
type Payload struct {
	Source   string
	Items    []Item
	Ignored  []Outcome
	Rejected []Outcome
	// Truncated is how many alerts the sender left out (Alertmanager's
	// truncatedAlerts, when its max_alerts is reached).
	Truncated int
	// ExternalURL and GroupLabels are Alertmanager's, for fetching the
	// alerts it left out.
	ExternalURL string
	GroupLabels map[string]string
	// Cleared are the CloudWatch alarms (ARN, else name: what AlarmOf
	// gives of the firing's event id) this payload says went back to OK.
	Cleared []string
}

// Machine-readable reasons an alert is ignored or rejected. Reasons of
// task validation (task.Reason*) are used as they are.
const (
	// Ignored: the alert is not one a diagnostic is for.
	ReasonNoRoute          = "no_route"
	ReasonResolved         = "resolved"          // resolved, and no route takes resolved alerts
	ReasonStateOK          = "state_ok"          // a CloudWatch alarm went to OK
	ReasonInsufficientData = "insufficient_data" // a CloudWatch alarm went to INSUFFICIENT_DATA
	ReasonNotProblem       = "not_a_problem"     // a Zabbix event value other than 0 or 1

	// Rejected: the alert is broken or its route could not make tasks.
	ReasonMalformedAlert = "malformed_alert"
	ReasonMissingEventID = "missing_event_id"
	ReasonTemplateError  = "template_error"
)

// normSeverity lower-cases a severity and writes spaces as '_', so the
// severities of every source ("High", "Not classified") fit a task's.
func normSeverity(s string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), " ", "_")
}
