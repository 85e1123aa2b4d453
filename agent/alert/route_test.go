package alert

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/configerr"
)

func TestRoutesValidate(t *testing.T) {
	rs := Routes{
		{Name: "ok", Tasks: []RouteTask{{Diagnostic: "uptime"}}},
		{Name: "ok", Match: Match{Name: "(", Labels: map[string]string{"sev": "[", "fine": "x"}, Source: []string{"Zabbix"}},
			Host: "{{ .Labels.instance | trimPort", Severity: "{{ nosuchfunc }}",
			Tasks: []RouteTask{{Params: map[string]string{"mount": "{{ .Labels.x "}}}},
		{Name: "", Tasks: nil},
	}
	err := rs.Validate()
	if err == nil {
		t.Fatal("valid")
	}
	var keys []string
	for _, e := range flatten(err) {
		var ce *configerr.Error
		ok := errors.As(e, &ce)
		if !ok {
			t.Fatalf("%T %v is not a configerr.Error", e, e)
		}
		keys = append(keys, ce.Key)
	}
	want := []string{"[1].name", "[1].match.source[0]", "[1].match.name", "[1].match.labels.sev", "[1].host", "[1].severity",
		"[1].tasks[0].diagnostic", "[1].tasks[0].params.mount", "[2].name", "[2].tasks"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys\n%v\nwant\n%v", keys, want)
	}
	if _, err := NewRouter(rs, nil); err == nil {
		t.Fatal("NewRouter took invalid routes")
	}
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

func TestRoute(t *testing.T) {
	rs := Routes{
		{Name: "resolved-too", Match: Match{Source: []string{"generic"}, Name: "^both$"}, Resolved: true, Host: "{{ .Host }}",
			Tasks: []RouteTask{{Diagnostic: "uptime"}}},
		{Name: "label", Match: Match{Labels: map[string]string{"team": "^$"}, Name: "^nolabel$"}, Host: "h1",
			Tasks: []RouteTask{{Diagnostic: "uptime"}}},
		{Name: "bad-regex-at-runtime", Match: Match{Name: "^tmpl$"}, Host: `{{ regexReplace .Labels.re "" .Host }}`,
			Tasks: []RouteTask{{Diagnostic: "uptime"}}},
		{Name: "huge", Match: Match{Name: "^huge$"}, Host: `{{ .Labels.a }}{{ .Labels.b }}`,
			Tasks: []RouteTask{{Diagnostic: "uptime"}}},
		{Name: "two-tasks-one-bad", Match: Match{Name: "^twotasks$"}, Host: "h1",
			Tasks: []RouteTask{{Diagnostic: "uptime"}, {Diagnostic: "disk-usage", Params: map[string]string{"mount": "{{ .Labels.m }}"}}}},
		{Name: "forbidden-host", Match: Match{Name: "^imds$"}, Host: "169.254.169.254", Tasks: []RouteTask{{Diagnostic: "uptime"}}},
		{Name: "funcs", Match: Match{Name: "^funcs$"},
			Host: `{{ .Labels.instance | trimPort | lower }}`, Severity: `{{ .Labels.sev | default "warning" | upper }}`,
			Tasks: []RouteTask{{Diagnostic: "disk-usage", Params: map[string]string{"mount": `{{ .Labels.mountpoint | default "/" }}`}}}},
		{Name: "catch-all", Host: "{{ .Host }}", Tasks: []RouteTask{{Diagnostic: "uptime"}}},
	}
	r, err := NewRouter(rs, testValidator(t))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		alert  Received
		route  string
		result string
		reason string
		tasks  int
	}{
		{"resolved taken by a resolved route", Received{Source: "generic", Name: "both", Host: "h", EventID: "1", Status: StatusResolved}, "resolved-too", ResultAccepted, "", 1},
		{"resolved skips the others", Received{Source: "zabbix", Name: "x", Host: "h", EventID: "1", Status: StatusResolved}, "", ResultIgnored, ReasonResolved, 0},
		{"missing label is empty", Received{Name: "nolabel", EventID: "1", Status: StatusFiring}, "label", ResultAccepted, "", 1},
		{"label present fails ^$", Received{Name: "nolabel", Host: "h2", EventID: "1", Labels: map[string]string{"team": "a"}, Status: StatusFiring}, "catch-all", ResultAccepted, "", 1},
		{"runtime template error", Received{Name: "tmpl", Host: "h", EventID: "1", Labels: map[string]string{"re": "("}, Status: StatusFiring}, "bad-regex-at-runtime", ResultRejected, ReasonTemplateError, 0},
		{"template output bound", Received{Name: "huge", EventID: "1", Labels: map[string]string{"a": strings.Repeat("a", 3000), "b": strings.Repeat("b", 3000)}, Status: StatusFiring}, "huge", ResultRejected, ReasonTemplateError, 0},
		{"one bad task rejects the alert", Received{Name: "twotasks", EventID: "1", Labels: map[string]string{"m": "/var; reboot"}, Status: StatusFiring}, "two-tasks-one-bad", ResultRejected, task.ReasonInvalidParam, 0},
		{"host validated", Received{Name: "imds", EventID: "1", Status: StatusFiring}, "forbidden-host", ResultRejected, task.ReasonHostForbidden, 0},
		{"empty host", Received{Name: "x", EventID: "1", Status: StatusFiring}, "catch-all", ResultRejected, task.ReasonMissingHost, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := r.Route(tc.alert, now)
			if d.Route != tc.route || d.Result != tc.result || d.Reason != tc.reason || len(d.Tasks) != tc.tasks {
				t.Fatalf("%+v; want route %q result %q reason %q tasks %d", d, tc.route, tc.result, tc.reason, tc.tasks)
			}
		})
	}

	d := r.Route(Received{Source: "alertmanager", Name: "funcs", EventID: "e-1", Status: StatusFiring,
		Labels: map[string]string{"instance": "WEB-01.Example.com:9100"}}, now)
	if d.Result != ResultAccepted || len(d.Tasks) != 1 {
		t.Fatalf("%+v", d)
	}
	got := d.Tasks[0]
	if got.Host != "web-01.example.com" || got.Severity != "warning" || got.Params["mount"] != "/" ||
		got.Alert.Source != "alertmanager" || got.Alert.Name != "funcs" || got.Alert.EventID != "e-1" || got.Alert.Route != d.Route ||
		got.Alert.Labels["instance"] != "WEB-01.Example.com:9100" || !got.CreatedAt.Equal(now) || got.ID == "" {
		t.Fatalf("task %+v", got)
	}
}

// TestRouteWriteBackRefs: a task carries its alert's write-back
// references, an annotation winning over a label of the same name, and a
// task message with an over-long reference is refused.
func TestRouteWriteBackRefs(t *testing.T) {
	r, err := NewRouter(Routes{{Name: "any", Host: "h1", Tasks: []RouteTask{{Diagnostic: "uptime"}}}}, testValidator(t))
	if err != nil {
		t.Fatal(err)
	}
	d := r.Route(Received{Source: "alertmanager", Name: "HighLoad", EventID: "fp@t", Status: StatusFiring,
		Labels:      map[string]string{"opsgenie_alias": "from-label", "pagerduty_incident_key": "key-1", "zabbix_event_id": " 81237 "},
		Annotations: map[string]string{"opsgenie_alias": "from-annotation", "pagerduty_incident_id": "PT4KHLK"}}, time.Now())
	if d.Result != ResultAccepted || len(d.Tasks) != 1 {
		t.Fatalf("%+v", d)
	}
	want := taskview.AlertRefs{PagerDutyIncidentID: "PT4KHLK", PagerDutyIncidentKey: "key-1", OpsgenieAlias: "from-annotation", ZabbixEventID: "81237"}
	if got := d.Tasks[0].Alert.Refs; got != want {
		t.Fatalf("refs %+v, want %+v", got, want)
	}
	d = r.Route(Received{Source: "alertmanager", Name: "HighLoad", EventID: "fp@t", Status: StatusFiring,
		Annotations: map[string]string{"opsgenie_alias": strings.Repeat("a", 600)}}, time.Now())
	if d.Result != ResultRejected || d.Reason != task.ReasonInvalidAlert {
		t.Fatalf("over-long reference: %+v, want rejected %s", d, task.ReasonInvalidAlert)
	}
}

// TestResolvedIsItsOwnEvent: a resolved alert's tasks do not share the
// firing one's event id, or dedupe would drop them as repeats.
func TestResolvedIsItsOwnEvent(t *testing.T) {
	p, err := DecodeAlertmanager([]byte(`{"version":"4","alerts":[
		{"status":"firing","labels":{"alertname":"A"},"startsAt":"2026-11-30T13:00:00Z","fingerprint":"f1"},
		{"status":"resolved","labels":{"alertname":"A"},"startsAt":"2026-11-30T13:00:00Z","fingerprint":"f1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	firing, resolved := p.Items[0].Alert.EventID, p.Items[1].Alert.EventID
	if firing != "f1@2026-11-30T13:00:00Z" || resolved != firing+"/resolved" {
		t.Fatalf("event ids %q and %q", firing, resolved)
	}
	z, err := DecodeZabbix([]byte(`{"event_id":"81237","event_value":"0"}`))
	if err != nil || z.Items[0].Alert.EventID != "81237/resolved" {
		t.Fatalf("%v %+v", err, z)
	}
}

func TestNoRoute(t *testing.T) {
	r, err := NewRouter(Routes{{Name: "only-zabbix", Match: Match{Source: []string{"zabbix"}}, Tasks: []RouteTask{{Diagnostic: "uptime"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := r.Route(Received{Source: "alertmanager", Name: "x", EventID: "1", Status: StatusFiring}, time.Now()); d.Result != ResultIgnored || d.Reason != ReasonNoRoute {
		t.Fatalf("%+v", d)
	}
}

func TestTemplateFuncs(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"web-01:9100", "web-01"}, {"[fd00::1]:9100", "fd00::1"}, {"web-01", "web-01"}, {"", ""},
	} {
		if got := trimPort(tc.in); got != tc.want {
			t.Errorf("trimPort(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := tmplDefault("/", ""); got != "/" {
		t.Errorf("default of empty = %q", got)
	}
	if got := tmplDefault("/", "/var"); got != "/var" {
		t.Errorf("default of a value = %q", got)
	}
	c := &regexCache{m: map[string]*regexp.Regexp{}}
	if got, err := c.replace(`\.internal$`, "", "a.internal"); err != nil || got != "a" {
		t.Errorf("regexReplace = %q, %v", got, err)
	}
}
