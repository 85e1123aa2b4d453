package task

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestNormalizeHost(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, reason string
	}{
		{"plain", "web-01.prod.example.com", "web-01.prod.example.com", ""},
		{"upper case", "WEB-01.Prod.Example.COM", "web-01.prod.example.com", ""},
		{"trailing dot", "web-01.example.com.", "web-01.example.com", ""},
		{"single label", "localhost", "localhost", ""},
		{"empty", "", "", ReasonMissingHost},
		{"only a dot", ".", "", ReasonInvalidHost},
		{"two trailing dots", "web.example.com..", "", ReasonInvalidHost},
		{"semicolon", "web;rm -rf /", "", ReasonInvalidHost},
		{"command substitution", "$(reboot).example.com", "", ReasonInvalidHost},
		{"backticks", "`id`.example.com", "", ReasonInvalidHost},
		{"newline", "web-01\n.example.com", "", ReasonInvalidHost},
		{"trailing newline", "web-01.example.com\n", "", ReasonInvalidHost},
		{"leading space", " web-01.example.com", "", ReasonInvalidHost},
		{"tab", "web\t01", "", ReasonInvalidHost},
		{"NUL", "web\x00.example.com", "", ReasonInvalidHost},
		{"DEL", "web\x7f.example.com", "", ReasonInvalidHost},
		{"leading dash", "-oProxyCommand=x", "", ReasonInvalidHost},
		{"label leading dash", "web.-x.example.com", "", ReasonInvalidHost},
		{"label trailing dash", "web-.example.com", "", ReasonInvalidHost},
		{"underscore", "web_01.example.com", "", ReasonInvalidHost},
		{"slash", "web/../etc", "", ReasonInvalidHost},
		{"cyrillic a look-alike", "web-01.ex\u0430mple.com", "", ReasonInvalidHost},
		{"kelvin sign lowercases to k", "\u212aube.example.com", "", ReasonInvalidHost},
		{"fullwidth dot", "web\uff0eexample.com", "", ReasonInvalidHost},
		{"punycode label", "xn--exmple-cua.com", "", ReasonInvalidHost},
		{"300 chars", strings.Repeat("a.", 150), "", ReasonInvalidHost},
		{"254 chars", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 62), "", ReasonInvalidHost},
		{"label 64 chars", strings.Repeat("a", 64) + ".com", "", ReasonInvalidHost},
		{"empty label", "web..example.com", "", ReasonInvalidHost},
		{"ipv4 literal", "10.0.0.1", "10.0.0.1", ""},
		{"ipv6 literal", "[::1]", "", ReasonInvalidHost},
		{"port", "web:22", "", ReasonInvalidHost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizeHost(tc.in)
			if Reason(err) != tc.reason {
				t.Fatalf("NormalizeHost(%q) error = %v, want reason %q", tc.in, err, tc.reason)
			}
			if got != tc.want {
				t.Fatalf("NormalizeHost(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func testValidator(t testing.TB) *Validator {
	mount, err := FullMatch(`/[A-Za-z0-9/_.-]*`)
	if err != nil {
		t.Fatal(err)
	}
	return &Validator{
		Allow: []*regexp.Regexp{regexp.MustCompile(`^[a-z0-9-]+(\.[a-z0-9-]+)*\.example\.com$`)},
		Catalog: map[string]Spec{
			"disk-usage": {Params: map[string]*regexp.Regexp{"mount": mount}, Required: []string{"mount"}},
			"uptime":     {},
		},
		MaxAge: time.Hour,
	}
}

func TestValidate(t *testing.T) {
	now := time.Date(2026, 8, 11, 10, 30, 0, 0, time.UTC)
	base := func() Task {
		return Task{ID: "evt-8812", Host: "Web-01.Prod.Example.com.", Diagnostic: "disk-usage",
			Params: map[string]string{"mount": "/var"}, Severity: "High",
			Alert: Alert{Source: "zabbix", Name: "Disk /var 95%", EventID: "8812"}, CreatedAt: now.Add(-time.Minute)}
	}
	for _, tc := range []struct {
		name   string
		edit   func(*Task)
		reason string
		field  string
	}{
		{"valid", func(*Task) {}, "", ""},
		{"no params needed", func(t *Task) { t.Diagnostic, t.Params = "uptime", nil }, "", ""},
		{"host not allowed", func(t *Task) { t.Host = "db-01.other.org" }, ReasonHostNotAllowed, "host"},
		{"host checked first", func(t *Task) { t.Host = "a;b"; t.Diagnostic = "nope" }, ReasonInvalidHost, "host"},
		{"missing diagnostic", func(t *Task) { t.Diagnostic = "" }, ReasonMissingDiagnostic, "diagnostic"},
		{"unknown diagnostic", func(t *Task) { t.Diagnostic = "full-dump" }, ReasonUnknownDiagnostic, "diagnostic"},
		{"unknown param", func(t *Task) { t.Params["cmd"] = "x" }, ReasonUnknownParam, "params.cmd"},
		{"missing param", func(t *Task) { t.Params = nil }, ReasonMissingParam, "params.mount"},
		{"param shell injection", func(t *Task) { t.Params["mount"] = "/var; rm -rf /" }, ReasonInvalidParam, "params.mount"},
		{"param command substitution", func(t *Task) { t.Params["mount"] = "/$(id)" }, ReasonInvalidParam, "params.mount"},
		{"param partial match is not enough", func(t *Task) { t.Params["mount"] = "/var x" }, ReasonInvalidParam, "params.mount"},
		{"param relative", func(t *Task) { t.Params["mount"] = "var" }, ReasonInvalidParam, "params.mount"},
		{"param newline", func(t *Task) { t.Params["mount"] = "/var\n/etc" }, ReasonInvalidParam, "params.mount"},
		{"param option", func(t *Task) { t.Params["mount"] = "--help" }, ReasonInvalidParam, "params.mount"},
		{"param too long", func(t *Task) { t.Params["mount"] = "/" + strings.Repeat("a", 2000) }, ReasonInvalidParam, "params.mount"},
		{"bad id", func(t *Task) { t.ID = "id with spaces" }, ReasonInvalidID, "id"},
		{"bad severity", func(t *Task) { t.Severity = "very high!" }, ReasonInvalidSeverity, "severity"},
		{"alert control chars", func(t *Task) { t.Alert.Name = "x\x1b[31m" }, ReasonInvalidAlert, "alert.name"},
		{"stale", func(t *Task) { t.CreatedAt = now.Add(-2 * time.Hour) }, ReasonStale, "created_at"},
		{"no created_at is not stale", func(t *Task) { t.CreatedAt = time.Time{} }, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := base()
			tc.edit(&task)
			err := testValidator(t).Validate(&task, now)
			if Reason(err) != tc.reason {
				t.Fatalf("Validate error = %v, want reason %q", err, tc.reason)
			}
			if err != nil {
				if e := err.(*Error); e.Field != tc.field {
					t.Fatalf("field = %q, want %q", e.Field, tc.field)
				}
				return
			}
			if task.Host != "web-01.prod.example.com" && tc.name == "valid" {
				t.Fatalf("host not normalised: %q", task.Host)
			}
			if task.Severity != "" && task.Severity != strings.ToLower(task.Severity) {
				t.Fatalf("severity not normalised: %q", task.Severity)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, body, reason string
	}{
		{"design example", `{"id": "evt-8812", "host": "web-01.prod.example.com", "diagnostic": "disk-usage",
 "params": {"mount": "/var"}, "severity": "high",
 "alert": {"source": "zabbix", "name": "Disk /var 95%", "event_id": "8812"},
 "created_at": "2026-08-11T10:00:00Z"}`, ""},
		{"unknown field", `{"host":"a","diagnostic":"b","shell":"rm"}`, ReasonMalformed},
		{"not json", `host=a`, ReasonMalformed},
		{"array", `[1,2]`, ReasonMalformed},
		{"wrong type", `{"host": 7}`, ReasonMalformed},
		{"trailing", `{"host":"a"} {"host":"b"}`, ReasonMalformed},
		{"bad time", `{"host":"a","created_at":"yesterday"}`, ReasonMalformed},
		{"invalid utf8", "{\"host\":\"\xff\"}", ReasonMalformed},
		{"too large", `{"host":"` + strings.Repeat("a", MaxBodySize) + `"}`, ReasonTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.body))
			if Reason(err) != tc.reason {
				t.Fatalf("Decode error = %v, want reason %q", err, tc.reason)
			}
		})
	}
}

func TestField(t *testing.T) {
	tk := Task{ID: "1", Alert: Alert{EventID: "e"}, Params: map[string]string{"mount": "/"}}
	for name, want := range map[string]string{"alert.event_id": "e", "id": "1", "params.mount": "/"} {
		if got, ok := tk.Field(name); !ok || got != want {
			t.Errorf("Field(%q) = %q, %v", name, got, ok)
		}
	}
	if _, ok := tk.Field("alert.nope"); ok {
		t.Error("unknown field reported ok")
	}
}
