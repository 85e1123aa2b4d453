package alert

import (
	"fmt"
	"regexp"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/autodiag/autodiag/agent/task"
)

// genericAlert is the body of POST /v1/alerts/generic, for any alerting
// system without its own endpoint.
type genericAlert struct {
	Source      string            `json:"source"`
	Name        string            `json:"name"`
	Host        string            `json:"host"`
	Severity    string            `json:"severity"`
	EventID     string            `json:"event_id"`
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"starts_at"`
}

// sourceRE bounds what a generic sender may call itself: it becomes a
// task's alert.source and a route's match.source.
var sourceRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// DecodeGeneric reads one generic alert object, or a JSON array of them
// (each answered at its index). Unknown members are refused. A missing
// source is "generic"; a missing event id is derived from the source,
// name, host and labels, so a resend of the same alert is a repeat.
func DecodeGeneric(body []byte) (Payload, error) {
	p := Payload{Source: SourceGeneric}
	if err := bodyError(body); err != nil {
		return p, err
	}
	raws := []jsontext.Value{jsontext.Value(body)}
	var probe jsontext.Value
	if err := unmarshal(body, &probe, true); err != nil {
		return p, malformed(err)
	}
	switch probe.Kind() {
	case '[':
		var err error
		if raws, err = splitArray(probe); err != nil {
			return p, malformed(err)
		}
	case '{':
	default:
		return p, &task.Error{Reason: ReasonMalformed, Detail: "want an alert object or a list of them"}
	}
	for i, raw := range raws {
		var g genericAlert
		if err := unmarshal(raw, &g, true); err != nil {
			if len(raws) == 1 && probe.Kind() == '{' {
				return p, malformed(err)
			}
			p.Rejected = append(p.Rejected, Outcome{Index: i, Reason: ReasonMalformedAlert, Detail: jsonDetail(err)})
			continue
		}
		if g.Source == "" {
			g.Source = SourceGeneric
		}
		if !sourceRE.MatchString(g.Source) {
			p.Rejected = append(p.Rejected, Outcome{Index: i, Reason: ReasonMalformedAlert, Detail: fmt.Sprintf("source must match %s", sourceRE)})
			continue
		}
		status := StatusFiring
		switch g.Status {
		case "", StatusFiring:
		case StatusResolved:
			status = StatusResolved
		default:
			p.Rejected = append(p.Rejected, Outcome{Index: i, Reason: ReasonMalformedAlert, Detail: fmt.Sprintf("status %.16q is neither firing nor resolved", g.Status)})
			continue
		}
		if g.EventID == "" {
			g.EventID = hashID(append([]string{g.Source, g.Name, g.Host}, labelParts(g.Labels)...)...)
		}
		p.add(i, Received{
			Source:      g.Source,
			Name:        g.Name,
			Host:        g.Host,
			Severity:    normSeverity(g.Severity),
			EventID:     g.EventID,
			Labels:      g.Labels,
			Annotations: g.Annotations,
			StartsAt:    g.StartsAt.UTC(),
			Status:      status,
		})
	}
	return p, nil
}
