package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// NoteMax bounds the note a pagerduty or opsgenie sink writes, in bytes
// (Opsgenie takes 25,000 characters; a note is for reading, the whole is
// behind its link).
const NoteMax = 8 << 10

// PagerDuty writes a note on the alert's incident (REST API v2, POST
// /incidents/{id}/notes) as the user named by From, with a REST API key.
type PagerDuty struct {
	httpSink
	token credential
	from  string
}

// HasTarget implements Targeter: the alert names an incident or an
// incident key.
func (p *PagerDuty) HasTarget(ev Event) bool {
	id, key := pagerDutyRefs(ev)
	return id != "" || key != ""
}

// pagerDutyRefs are the incident id of ev's alert (its
// pagerduty_incident_id reference) and the incident key to look it up by
// (its pagerduty_incident_key reference, else the event id of an alert a
// generic sender sent, which names its own ids).
func pagerDutyRefs(ev Event) (id, key string) {
	a := alertOf(ev)
	if a == nil {
		return "", ""
	}
	key = a.Refs.PagerDutyIncidentKey
	if key == "" && a.Source != "alertmanager" && a.Source != "zabbix" && a.Source != "cloudwatch" {
		key = baseEventID(a.EventID)
	}
	return a.Refs.PagerDutyIncidentID, key
}

func (p *PagerDuty) header() http.Header {
	return http.Header{
		"Authorization": {"Token token=" + p.token.get()},
		"Accept":        {"application/vnd.pagerduty+json;version=2"},
		"From":          {p.from},
	}
}

func (p *PagerDuty) endpoint(path string, q url.Values) string {
	u := strings.TrimRight(p.target(), "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// Send finds the incident (by id, else by incident key), looks among its
// notes for this delivery's mark, and writes the note when none has it.
// An incident key that finds no incident is retried: the incident may be
// being created.
func (p *PagerDuty) Send(ctx context.Context, d Delivery) error {
	var ev Event
	if err := json.Unmarshal(d.Body, &ev); err != nil {
		return &SendError{Permanent: true}
	}
	id, key := pagerDutyRefs(ev)
	if id == "" && key == "" {
		return &SendError{Permanent: true, Reason: ReasonNoTarget, Detail: "the alert names no PagerDuty incident"}
	}
	if id == "" {
		var found struct {
			Incidents []struct {
				ID string `json:"id"`
			} `json:"incidents"`
		}
		q := url.Values{"incident_key": {key}}
		if err := p.apiCall(ctx, http.MethodGet, p.endpoint("/incidents", q), p.header(), nil, &found); err != nil {
			return err
		}
		if len(found.Incidents) == 0 {
			return &SendError{Status: http.StatusNotFound, Detail: "no incident has the key yet"}
		}
		id = found.Incidents[0].ID
	}
	path := "/incidents/" + url.PathEscape(id) + "/notes"
	var notes struct {
		Notes []struct {
			Content string `json:"content"`
		} `json:"notes"`
	}
	if err := p.apiCall(ctx, http.MethodGet, p.endpoint(path, nil), p.header(), nil, &notes); err != nil {
		return err
	}
	mark := deliveryMark(d.ID)
	for _, n := range notes.Notes {
		if strings.Contains(n.Content, mark) {
			return nil
		}
	}
	body := map[string]any{"note": map[string]string{"content": noteText(ev, NoteMax)}}
	return p.apiCall(ctx, http.MethodPost, p.endpoint(path, nil), p.header(), body, nil)
}

var _ Targeter = (*PagerDuty)(nil)
