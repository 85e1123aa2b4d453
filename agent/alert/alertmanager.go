package alert

import (
	"fmt"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/autodiag/autodiag/agent/task"
)

// amMessage is Alertmanager's webhook payload, version 4.
type amMessage struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   int               `json:"truncatedAlerts"`
	Status            string            `json:"status"`
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            jsontext.Value    `json:"alerts"`
}

type amAlert struct {
	Status       string            `json:"status"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

// DecodeAlertmanager splits an Alertmanager webhook payload (version 4)
// into one alert per element of alerts[], resolved ones included (a route
// decides whether it wants them). An element that cannot be read is
// rejected on its own. The event id is fingerprint and startsAt, so a
// repeat notification of one alert has the same id and a new firing of
// it a new one.
func DecodeAlertmanager(body []byte) (Payload, error) {
	p := Payload{Source: SourceAlertmanager}
	if err := bodyError(body); err != nil {
		return p, err
	}
	var m amMessage
	if err := unmarshal(body, &m, false); err != nil {
		return p, malformed(err)
	}
	if m.Version != "4" {
		return p, &task.Error{Reason: ReasonUnsupportedVersion, Field: "version", Detail: fmt.Sprintf("%.16q is not 4", m.Version)}
	}
	if len(m.Alerts) == 0 {
		return p, &task.Error{Reason: ReasonMalformed, Field: "alerts", Detail: "missing"}
	}
	items, err := splitArray(m.Alerts)
	if err != nil {
		return p, &task.Error{Reason: ReasonMalformed, Field: "alerts", Detail: jsonDetail(err)}
	}
	p.Truncated = max(m.TruncatedAlerts, 0)
	p.ExternalURL, p.GroupLabels = m.ExternalURL, m.GroupLabels
	for i, raw := range items {
		var a amAlert
		if err := unmarshal(raw, &a, false); err != nil {
			p.Rejected = append(p.Rejected, Outcome{Index: i, Reason: ReasonMalformedAlert, Detail: jsonDetail(err)})
			continue
		}
		status := StatusFiring
		switch a.Status {
		case "firing":
		case "resolved":
			status = StatusResolved
		default:
			p.Rejected = append(p.Rejected, Outcome{Index: i, Reason: ReasonMalformedAlert, Detail: fmt.Sprintf("status %.16q is neither firing nor resolved", a.Status)})
			continue
		}
		p.add(i, amReceived(a.Fingerprint, a.Labels, a.Annotations, a.StartsAt, status))
	}
	return p, nil
}

// amReceived is one Alertmanager alert, from the webhook or from API v2
// (TruncatedFetcher), as a Received. Its event id is the fingerprint (a
// hash of the labels when there is none) and startsAt; none without
// startsAt.
func amReceived(fingerprint string, labels, annotations map[string]string, startsAt time.Time, status string) Received {
	fp := fingerprint
	if fp == "" {
		fp = hashID(labelParts(labels)...)
	}
	var id string
	if !startsAt.IsZero() {
		id = fp + "@" + startsAt.UTC().Format(time.RFC3339Nano)
	}
	return Received{
		Source:      SourceAlertmanager,
		Name:        labels["alertname"],
		Severity:    normSeverity(labels["severity"]),
		EventID:     id,
		Labels:      labels,
		Annotations: annotations,
		StartsAt:    startsAt.UTC(),
		Status:      status,
	}
}
