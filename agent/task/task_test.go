package task

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/autodiag/autodiag/agent/taskview"
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
		{"ipv4 literal trailing dot", "169.254.169.254.", "169.254.169.254", ""},
		{"ipv6 literal", "[::1]", "", ReasonInvalidHost},
		{"ipv6 imds", "fd00:ec2::254", "", ReasonInvalidHost},
		{"ipv6 imds bracketed", "[fd00:ec2::254]", "", ReasonInvalidHost},
		{"ipv4-mapped ipv6", "::ffff:169.254.169.254", "", ReasonInvalidHost},
		{"port", "web:22", "", ReasonInvalidHost},
		{"decimal number", "2852039166", "", ReasonInvalidHost},
		{"hex number", "0xa9fea9fe", "", ReasonInvalidHost},
		{"hex number upper case", "0XA9FEA9FE", "", ReasonInvalidHost},
		{"bare 0x", "0x", "", ReasonInvalidHost},
		{"zero", "0", "", ReasonInvalidHost},
		{"octal quad", "0251.0376.0251.0376", "", ReasonInvalidHost},
		{"leading zero", "010.0.0.1", "", ReasonInvalidHost},
		{"short form", "127.1", "", ReasonInvalidHost},
		{"three parts", "169.254.43518", "", ReasonInvalidHost},
		{"mixed hex quad", "0xa9.0xfe.0xa9.0xfe", "", ReasonInvalidHost},
		{"octet over 255", "256.0.0.1", "", ReasonInvalidHost},
		{"five parts", "1.2.3.4.5", "", ReasonInvalidHost},
		{"numeric last label", "web.example.123", "", ReasonInvalidHost},
		{"hex last label", "web.0x10", "", ReasonInvalidHost},
		{"numeric first label", "123.example.com", "123.example.com", ""},
		{"hex-looking first label", "0x10.example.com", "0x10.example.com", ""},
		{"hex word last label", "web.cafe", "web.cafe", ""},
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
			Alert: taskview.Alert{Source: "zabbix", Name: "Disk /var 95%", EventID: "8812"}, CreatedAt: now.Add(-time.Minute)}
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
				var e *Error
				if !errors.As(err, &e) || e.Field != tc.field {
					t.Fatalf("error %v: want an *Error with field %q", err, tc.field)
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

func TestValidateHostTarget(t *testing.T) {
	now := time.Date(2026, 8, 11, 10, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		host string
		// reason with the zero Validator, and with AllowIPLiterals.
		strict, optIn string
	}{
		{"web-01.example.com", "", ""},
		{"localhost.example.com", "", ""},
		{"10.0.0.1", ReasonIPLiteral, ""},
		{"192.0.2.10", ReasonIPLiteral, ""},
		{"172.16.0.5", ReasonIPLiteral, ""},
		{"169.254.169.254", ReasonHostForbidden, ReasonHostForbidden},
		{"169.254.169.254.", ReasonHostForbidden, ReasonHostForbidden},
		{"169.254.170.2", ReasonHostForbidden, ReasonHostForbidden},
		{"169.254.169.253", ReasonHostForbidden, ReasonHostForbidden},
		{"127.0.0.1", ReasonHostForbidden, ReasonHostForbidden},
		{"127.255.3.9", ReasonHostForbidden, ReasonHostForbidden},
		{"0.0.0.0", ReasonHostForbidden, ReasonHostForbidden},
		{"0.1.2.3", ReasonHostForbidden, ReasonHostForbidden},
		{"localhost", ReasonHostForbidden, ReasonHostForbidden},
		{"LOCALHOST.", ReasonHostForbidden, ReasonHostForbidden},
		{"web.localhost", ReasonHostForbidden, ReasonHostForbidden},
		{"instance-data", ReasonHostForbidden, ReasonHostForbidden},
		{"Instance-Data.", ReasonHostForbidden, ReasonHostForbidden},
		{"instance-data.ec2.internal", ReasonHostForbidden, ReasonHostForbidden},
		{"metadata.google.internal", ReasonHostForbidden, ReasonHostForbidden},
		{"metadata", ReasonHostForbidden, ReasonHostForbidden},
		{"metadata.example.com", "", ""},
		{"instance-data.example.com", "", ""},
		{"2852039166", ReasonInvalidHost, ReasonInvalidHost},
		{"0xa9fea9fe", ReasonInvalidHost, ReasonInvalidHost},
		{"0", ReasonInvalidHost, ReasonInvalidHost},
		{"0251.0376.0251.0376", ReasonInvalidHost, ReasonInvalidHost},
		{"127.1", ReasonInvalidHost, ReasonInvalidHost},
		{"0x7f.1", ReasonInvalidHost, ReasonInvalidHost},
		{"010.0.0.1", ReasonInvalidHost, ReasonInvalidHost},
		{"fd00:ec2::254", ReasonInvalidHost, ReasonInvalidHost},
		{"[fd00:ec2::254]", ReasonInvalidHost, ReasonInvalidHost},
		{"::1", ReasonInvalidHost, ReasonInvalidHost},
	} {
		for _, optIn := range []bool{false, true} {
			want := tc.strict
			if optIn {
				want = tc.optIn
			}
			t.Run(fmt.Sprintf("%s/allow_ip_literals=%v", tc.host, optIn), func(t *testing.T) {
				// The README's default allow-list: it matches every name
				// and dotted quad, so what is rejected here is rejected
				// before it.
				v := &Validator{
					Allow:           []*regexp.Regexp{regexp.MustCompile(`^[a-z0-9-]+(\.[a-z0-9-]+)*$`)},
					Catalog:         map[string]Spec{"uptime": {}},
					AllowIPLiterals: optIn,
				}
				tk := Task{Host: tc.host, Diagnostic: "uptime"}
				err := v.Validate(&tk, now)
				if Reason(err) != want {
					t.Fatalf("Validate(host %q) error = %v, want reason %q", tc.host, err, want)
				}
				var e *Error
				if err != nil && (!errors.As(err, &e) || e.Field != "host") {
					t.Fatalf("error %v: want an *Error with field host", err)
				}
				h, err := v.ValidateHost(tc.host)
				if Reason(err) != want || err == nil && h != tk.Host {
					t.Fatalf("ValidateHost(%q) = %q, %v; want reason %q like Validate", tc.host, h, err, want)
				}
			})
		}
	}
}

// TestIPLiteralsStillNeedTheAllowList: the opt-in lifts the ban on IP
// literals, not the allow-list.
func TestIPLiteralsStillNeedTheAllowList(t *testing.T) {
	v := testValidator(t)
	v.AllowIPLiterals = true
	tk := Task{Host: "10.0.0.1", Diagnostic: "uptime"}
	if err := v.Validate(&tk, time.Now()); Reason(err) != ReasonHostNotAllowed {
		t.Fatalf("Validate error = %v, want %s", err, ReasonHostNotAllowed)
	}
}

// TestForbiddenAddr covers the IPv6 side, which host syntax keeps out of
// Validate today.
func TestForbiddenAddr(t *testing.T) {
	for addr, forbidden := range map[string]bool{
		"fd00:ec2::254":          true,
		"::1":                    true,
		"::":                     true,
		"fe80::1":                true,
		"::ffff:169.254.169.254": true,
		"::ffff:127.0.0.1":       true,
		"169.254.0.1":            true,
		"fd00:ec2::253":          false,
		"2001:db8::1":            false,
		"10.0.0.1":               false,
	} {
		if got := forbiddenAddr(netip.MustParseAddr(addr)) != ""; got != forbidden {
			t.Errorf("forbiddenAddr(%s) = %v, want %v", addr, got, forbidden)
		}
	}
}

func TestValidateCreatedAt(t *testing.T) {
	now := time.Date(2026, 8, 11, 10, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		created time.Time
		maxAge  time.Duration
		reason  string
	}{
		{"at the skew bound", now.Add(MaxFutureSkew), time.Hour, ""},
		{"past the skew bound", now.Add(MaxFutureSkew + time.Second), time.Hour, ReasonInvalidCreatedAt},
		{"far future", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), time.Hour, ReasonInvalidCreatedAt},
		{"far future without max_age", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 0, ReasonInvalidCreatedAt},
		{"past max_age", now.Add(-2 * time.Hour), time.Hour, ReasonStale},
		{"absent", time.Time{}, time.Hour, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := testValidator(t)
			v.MaxAge = tc.maxAge
			tk := Task{Host: "web-01.example.com", Diagnostic: "uptime", CreatedAt: tc.created}
			err := v.Validate(&tk, now)
			if Reason(err) != tc.reason {
				t.Fatalf("Validate error = %v, want reason %q", err, tc.reason)
			}
			var e *Error
			if err != nil && (!errors.As(err, &e) || e.Field != "created_at") {
				t.Fatalf("error %v: want an *Error with field created_at", err)
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
		{"just under the cap", `{"host":"` + strings.Repeat("a", MaxBodySize-11) + `"}`, ""},
		{"case-variant second host", `{"host": "ok.example.com", "HOST": "169.254.169.254", "diagnostic": "uptime"}`, ReasonMalformed},
		{"case-variant only", `{"Host": "ok.example.com", "diagnostic": "uptime"}`, ReasonMalformed},
		{"unicode-folded name", `{"ho\u017ft": "169.254.169.254", "diagnostic": "uptime"}`, ReasonMalformed},
		{"duplicate host", `{"host": "ok.example.com", "host": "169.254.169.254", "diagnostic": "uptime"}`, ReasonMalformed},
		{"duplicate host escaped", `{"host": "ok.example.com", "h\u006fst": "169.254.169.254", "diagnostic": "uptime"}`, ReasonMalformed},
		{"duplicate param", `{"host": "a", "diagnostic": "disk-usage", "params": {"mount": "/var", "mount": "/"}}`, ReasonMalformed},
		{"duplicate alert member", `{"host": "a", "diagnostic": "b", "alert": {"event_id": "1", "event_id": "2"}}`, ReasonMalformed},
		{"case-variant alert member", `{"host": "a", "diagnostic": "b", "alert": {"event_id": "1", "EVENT_ID": "2"}}`, ReasonMalformed},
		{"null", `null`, ""},
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
	tk := Task{ID: "1", Alert: taskview.Alert{EventID: "e"}, Params: map[string]string{"mount": "/"}}
	for name, want := range map[string]string{"alert.event_id": "e", "id": "1", "params.mount": "/"} {
		if got, ok := tk.Field(name); !ok || got != want {
			t.Errorf("Field(%q) = %q, %v", name, got, ok)
		}
	}
	if _, ok := tk.Field("alert.nope"); ok {
		t.Error("unknown field reported ok")
	}
}

// TestDecodeDetailBounded: a decode error quotes names from the body; the
// detail stays short and valid UTF-8 however long the name is.
func TestDecodeDetailBounded(t *testing.T) {
	body := `{"host": "a", "` + strings.Repeat("é", 100_000) + `": 1}`
	_, err := Decode([]byte(body))
	if Reason(err) != ReasonMalformed {
		t.Fatalf("Decode error = %v, want %s", err, ReasonMalformed)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Decode error %v is not an *Error", err)
	}
	if d := e.Detail; len(d) > maxDetailLen+len("…") || !utf8.ValidString(d) {
		t.Fatalf("detail of %d bytes (valid UTF-8: %v)", len(d), utf8.ValidString(d))
	}
}

// A malformed message names what the sender may write, never the Go type
// it was decoded into.
func TestDecodeMalformedListsValidFields(t *testing.T) {
	for _, body := range []string{`{"host":"web-1","diagnostic":"uptime","colour":"red"}`, `{"host":7,"diagnostic":"uptime"}`} {
		_, err := Decode([]byte(body))
		if Reason(err) != ReasonMalformed {
			t.Fatalf("%s: %v, want %s", body, err, ReasonMalformed)
		}
		msg := err.Error()
		if strings.Contains(msg, "task.Task") || strings.Contains(msg, "Go ") || !strings.Contains(msg, "valid fields: id, host, diagnostic, params, severity, alert, created_at") {
			t.Errorf("%s: %q, want the valid fields and no Go type", body, msg)
		}
	}
}

// TestErrorsThatTeach: an unknown diagnostic names the catalog, a host
// with a port says to drop it.
func TestErrorsThatTeach(t *testing.T) {
	v := testValidator(t)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tk := Task{ID: "t1", Host: "web-01.example.com", Diagnostic: "uptim", CreatedAt: now}
	err := v.Validate(&tk, now)
	want := "(have " + strings.Join(slices.Sorted(maps.Keys(v.Catalog)), ", ") + ")"
	if Reason(err) != ReasonUnknownDiagnostic || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v; want %s listing %s", err, ReasonUnknownDiagnostic, want)
	}
	for _, tc := range []struct{ host, want string }{
		{"web-01:9100", `"web-01:9100" has a port: a task names a host, drop ":9100" (use "web-01")`},
		{"[fd00::1]:9100", `drop ":9100" (use "fd00::1")`},
	} {
		_, err := NormalizeHost(tc.host)
		if Reason(err) != ReasonInvalidHost || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NormalizeHost(%q) = %v; want %s saying %s", tc.host, err, ReasonInvalidHost, tc.want)
		}
	}
	big := map[string]Spec{}
	for i := range 25 {
		big[fmt.Sprintf("d%02d", i)] = Spec{}
	}
	if got := catalogNames(big); !strings.HasSuffix(got, "d19 and 5 more") || !strings.HasPrefix(got, "have d00, d01") {
		t.Errorf("catalogNames of 25 = %q", got)
	}
	if got := catalogNames(nil); got != "the catalog is empty" {
		t.Errorf("catalogNames(nil) = %q", got)
	}
}

// TestInvestigationOriginNeedsToken: origin "investigation" (the
// investigation's limiter rule, no report) is accepted only with the
// token the agent's own investigator signs under the fleet's key; any
// other sender's claim of it is rejected invalid_origin, naming
// origin_token.
func TestInvestigationOriginNeedsToken(t *testing.T) {
	now := time.Date(2026, 8, 11, 10, 30, 0, 0, time.UTC)
	key, other := DeriveOriginKey("fleet"), DeriveOriginKey("attacker")
	v := func(k []byte) *Validator {
		return &Validator{Allow: []*regexp.Regexp{regexp.MustCompile(`.`)}, Catalog: map[string]Spec{"uptime": {}, "df": {}}, OriginKey: k}
	}
	call := func() Task {
		return Task{ID: "inv-1-s2-c0", Host: "Web-01.example.com.", Diagnostic: "uptime", Origin: OriginInvestigation,
			Parent: "t-1", Investigation: "inv-1", Step: 2, CreatedAt: now}
	}
	signed := func(k []byte, edit func(*Task)) Task {
		tk := call()
		tk.OriginToken = SignOrigin(k, &tk)
		if edit != nil {
			edit(&tk)
		}
		return tk
	}
	tests := []struct {
		name  string
		v     *Validator
		tk    Task
		valid bool
	}{
		{"signed by the investigator", v(key), signed(key, nil), true},
		{"no token", v(key), call(), false},
		{"made-up token", v(key), signed(key, func(tk *Task) { tk.OriginToken = "v1.AAAA" }), false},
		{"signed with another key", v(key), signed(other, nil), false},
		{"token moved to another host", v(key), signed(key, func(tk *Task) { tk.Host = "db-01.example.com" }), false},
		{"token moved to another diagnostic", v(key), signed(key, func(tk *Task) { tk.Diagnostic = "df" }), false},
		{"token moved to another id", v(key), signed(key, func(tk *Task) { tk.ID = "inv-1-s2-c1" }), false},
		{"token moved to another parent", v(key), signed(key, func(tk *Task) { tk.Parent = "t-2" }), false},
		{"token moved to another step", v(key), signed(key, func(tk *Task) { tk.Step = 3 }), false},
		{"validator without a key", v(nil), signed(key, nil), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk := tt.tk
			err := tt.v.Validate(&tk, now)
			if tt.valid && err != nil {
				t.Fatalf("rejected: %v", err)
			}
			var e *Error
			if !tt.valid && (Reason(err) != ReasonInvalidOrigin || !errors.As(err, &e) || e.Field != "origin_token") {
				t.Fatalf("Validate = %v; want invalid_origin at origin_token", err)
			}
		})
	}
	// A token without the origin it signs proves nothing and is dropped.
	tk := Task{Host: "web-01.example.com", Diagnostic: "uptime", OriginToken: "v1.x"}
	if err := v(key).Validate(&tk, now); err != nil || tk.OriginToken != "" {
		t.Fatalf("plain task with a token: %v, token %q; want accepted without it", err, tk.OriginToken)
	}
}

// TestOriginTokenSurvivesTheQueue: a signed call still verifies after the
// trip through a message body (an empty params map is dropped, the time
// is written as text).
func TestOriginTokenSurvivesTheQueue(t *testing.T) {
	key := DeriveOriginKey("fleet")
	now := time.Date(2026, 8, 11, 10, 30, 0, 123456789, time.FixedZone("x", 3600))
	tk := Task{ID: "inv-1-s0-c0", Host: "web-01.example.com", Diagnostic: "uptime", Params: map[string]string{},
		Origin: OriginInvestigation, Parent: "t-1", Investigation: "inv-1", CreatedAt: now}
	tk.OriginToken = SignOrigin(key, &tk)
	body, err := json.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	v := &Validator{Allow: []*regexp.Regexp{regexp.MustCompile(`.`)}, Catalog: map[string]Spec{"uptime": {}}, OriginKey: key}
	if err := v.Validate(&back, now); err != nil {
		t.Fatalf("the signed call after the queue: %v (body %s)", err, body)
	}
}
