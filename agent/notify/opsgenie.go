package notify

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// Opsgenie adds a note to the alert's Opsgenie alert, found by its alias
// (Alert API v2, POST /v2/alerts/{alias}/notes?identifierType=alias),
// with an API integration key (GenieKey).
type Opsgenie struct {
	httpSink
	token credential
}

// HasTarget implements Targeter: the alert names an Opsgenie alias.
func (o *Opsgenie) HasTarget(ev Event) bool { return opsgenieAlias(ev) != "" }

// opsgenieAlias is the alias of ev's alert: its opsgenie_alias reference,
// else the event id of an alert a generic sender sent.
func opsgenieAlias(ev Event) string {
	a := alertOf(ev)
	if a == nil {
		return ""
	}
	if a.Refs.OpsgenieAlias != "" {
		return a.Refs.OpsgenieAlias
	}
	if a.Source != "alertmanager" && a.Source != "zabbix" && a.Source != "cloudwatch" {
		return baseEventID(a.EventID)
	}
	return ""
}

func (o *Opsgenie) notesURL(alias string) string {
	return strings.TrimRight(o.target(), "/") + "/v2/alerts/" + url.PathEscape(alias) + "/notes?identifierType=alias"
}

// Send lists the alert's notes (which also says the alert exists: a 404
// is retried, as the alert may be being created), and adds the note when
// none carries this delivery's mark. Opsgenie answers 202 and applies the
// note asynchronously.
func (o *Opsgenie) Send(ctx context.Context, d Delivery) error {
	var ev Event
	if err := json.Unmarshal(d.Body, &ev); err != nil {
		return &SendError{Permanent: true}
	}
	alias := opsgenieAlias(ev)
	if alias == "" {
		return &SendError{Permanent: true, Reason: ReasonNoTarget, Detail: "the alert names no Opsgenie alias"}
	}
	h := http.Header{"Authorization": {"GenieKey " + o.token.get()}}
	var notes struct {
		Data []struct {
			Note string `json:"note"`
		} `json:"data"`
	}
	err := o.apiCall(ctx, http.MethodGet, o.notesURL(alias)+"&limit=100&order=desc", h, nil, &notes)
	var se *SendError
	if errors.As(err, &se) && se.Status == http.StatusNotFound {
		return &SendError{Status: http.StatusNotFound, Detail: "no alert has the alias yet"}
	}
	if err != nil {
		return err
	}
	mark := deliveryMark(d.ID)
	for _, n := range notes.Data {
		if strings.Contains(n.Note, mark) {
			return nil
		}
	}
	body := map[string]string{"note": noteText(ev, NoteMax), "source": "autodiag", "user": "autodiag"}
	return o.apiCall(ctx, http.MethodPost, o.notesURL(alias), h, body, nil)
}

var _ Targeter = (*Opsgenie)(nil)
