package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/autodiag/autodiag/agent/internal/urlcheck"
	"github.com/autodiag/autodiag/agent/internal/utf8cut"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/taskview"
)

// Reasons a write-back is given up for, beside status_<code>.
const (
	// ReasonAPIError: the API answered 2xx with an error of its own
	// (a Zabbix JSON-RPC error, Slack's ok: false) that retrying cannot fix.
	ReasonAPIError = "api_error"
	// ReasonNoTarget: the event names nothing to write on (no alert, or
	// none this sink's system knows).
	ReasonNoTarget = "no_target"
)

// maxAPIAnswer bounds an API answer a write-back sink decodes (a list of
// notes, an incident search); longer answers are cut and then fail to
// decode, which the sink treats as "cannot check".
const maxAPIAnswer = 1 << 20

// Targeter is a sink that writes on an alert in another system: an event
// whose task names no alert that system knows is not written for it at
// all, so it neither waits in the outbox nor ends dead.
type Targeter interface {
	// HasTarget says whether ev names something the sink can write on.
	HasTarget(ev Event) bool
}

// SinkApplies says whether the sink configured by c takes ev: it wants
// the event type and, for a write-back sink, the event names an alert its
// system knows. A process that enqueues for sinks it does not run
// (`autodiag report`) asks this.
func SinkApplies(c SinkConfig, ev Event) bool {
	if !wants(c.On, ev.Type) {
		return false
	}
	switch c.Type {
	case TypeZabbix:
		return zabbixEventID(ev) != ""
	case TypePagerDuty:
		id, key := pagerDutyRefs(ev)
		return id != "" || key != ""
	case TypeOpsgenie:
		return opsgenieAlias(ev) != ""
	}
	return true
}

func wants(on []EventType, t EventType) bool {
	for _, e := range on {
		if e == t {
			return true
		}
	}
	return false
}

// alertOf is the event's alert, nil for a drain event or a task that came
// from no alert.
func alertOf(ev Event) *taskview.Alert {
	if ev.Task == nil {
		return nil
	}
	return ev.Task.Alert
}

// baseEventID is an alert's event id without the mark of its resolution:
// a resolved alert is written on the event that fired.
func baseEventID(id string) string {
	return strings.TrimSuffix(id, "/resolved")
}

// credential is a token read at start, read again at each send when it
// comes from a secret store (a rotation applies without a restart).
type credential struct {
	value  string
	ref    string
	getenv func(string) (string, bool)
}

func (c credential) get() string {
	if c.ref != "" {
		if v, ok := c.getenv(c.ref); ok && v != "" {
			return v
		}
	}
	return c.value
}

// readCredential reads the credential named by secretRef or env (the
// first set) through getenv; what names where it comes from in an error.
func readCredential(sink, key, secretRef, env string, getenv func(string) (string, bool)) (credential, error) {
	name := secretRef
	if name == "" {
		name = env
	}
	v, ok := getenv(name)
	if !ok || v == "" {
		return credential{}, fmt.Errorf("notify: sink %s: %s: %s %s is not set", sink, key, kind(secretRef), name)
	}
	return credential{value: v, ref: secretRef, getenv: getenv}, nil
}

// outboundURL checks a write-back sink's endpoint with the rules of every
// configured outbound URL (never the metadata service or a link-local
// address) and the sink's scheme rule. Its error never holds the URL.
func outboundURL(raw string, allowHTTP bool) error {
	if err := checkURL(raw, allowHTTP); err != nil {
		return err
	}
	return urlcheck.Check(raw, urlcheck.Rules{AllowHTTP: allowHTTP})
}

// apiCall is one request of a write-back sink: a JSON body (or none), the
// answer read within maxAPIAnswer and decoded into out when it is a 2xx
// and out is not nil. Non-2xx answers are a *SendError as classify makes
// them. Errors never hold the URL or a header value.
func (s *httpSink) apiCall(ctx context.Context, method, url string, header http.Header, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return &SendError{Permanent: true}
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return &SendError{Permanent: true}
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if in != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	req.Header.Set("User-Agent", "autodiag")
	resp, err := s.client.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) && ue.Unwrap() != nil {
			err = ue.Unwrap()
		}
		return fmt.Errorf("notify: %s to sink %s: %w", method, s.name, err)
	}
	defer resp.Body.Close()
	raw, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAPIAnswer))
	if err := classify(resp); err != nil {
		return err
	}
	if out != nil {
		if rerr != nil {
			return fmt.Errorf("notify: read the answer of sink %s: %w", s.name, rerr)
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return &decodeError{sink: s.name, err: err}
		}
	}
	return nil
}

// decodeError is a 2xx answer that is not the documented JSON: retried,
// as a proxy's error page in front of the API is passing.
type decodeError struct {
	sink string
	err  error
}

func (e *decodeError) Error() string {
	return fmt.Sprintf("notify: sink %s: the answer is not the API's JSON: %v", e.sink, e.err)
}

func (e *decodeError) Unwrap() error { return e.err }

// noteText is what a write-back sink writes on the alert for ev, at most
// limit bytes (so at most limit characters): a headline, the report's
// root cause with its confidence and evidence (or, for a task event, the
// output), and a footer that is never cut: the task id, trace id, the
// delivery id (the mark a retry finds) and where the whole is. The texts
// are the record's, redacted before they were stored.
func noteText(ev Event, limit int) string {
	t := ev.Task
	if t == nil {
		return utf8cut.Head(fmt.Sprintf("autodiag: %s on %s [autodiag delivery %s]", ev.Type, ev.InstanceID, ev.ID), limit)
	}
	link := "autodiag show " + t.ID
	switch {
	case t.TraceURL != "":
		link = t.TraceURL
	case t.OutputURL != "":
		link = t.OutputURL
	}
	var foot strings.Builder
	foot.WriteString("\n\ntask " + t.ID)
	if t.TraceID != "" {
		foot.WriteString(" · trace " + t.TraceID)
	}
	foot.WriteString(" · " + deliveryMark(ev.ID))
	foot.WriteString("\nwhole: " + link)

	var b strings.Builder
	head := fmt.Sprintf("autodiag: %s: %s on %s", headline(ev.Type, t.Outcome), t.Diagnostic, t.Host)
	b.WriteString(head + "\n")
	var r report.Result
	if ev.Type == EventResolved {
		b.WriteString(resolvedLine(t.Report) + "\n")
	} else if ev.Type == EventReport && len(t.Report) > 0 && json.Unmarshal(t.Report, &r) == nil && r.Status != "" {
		if r.Confidence != "" {
			b.WriteString("Confidence: " + r.Confidence + "\n")
		}
		if r.Status != report.StatusOK && r.Reason != "" {
			b.WriteString("Report " + r.Status + ": " + r.Reason + "\n")
		}
		if inv := r.Investigation; inv != nil && len(inv.Evidence) > 0 {
			b.WriteString("Evidence (task ids): " + strings.Join(inv.Evidence, ", ") + "\n")
		}
		if r.Markdown != "" {
			b.WriteString("\n" + r.Markdown)
		}
	} else {
		if t.Reason != "" {
			b.WriteString("Reason: " + t.Reason + "\n")
		}
		if t.Output != "" {
			b.WriteString("\n" + t.Output)
		}
	}
	room := limit - len(foot.String())
	if room < len(head) {
		return utf8cut.Head(head+foot.String(), limit)
	}
	return Excerpt(strings.TrimRight(b.String(), "\n"), room, link) + foot.String()
}

// deliveryMark is the text a write-back carries to say which delivery
// wrote it; a retry looks for it among the notes before it writes again.
func deliveryMark(id string) string { return "autodiag delivery " + id }
