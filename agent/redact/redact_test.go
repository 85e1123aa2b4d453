package redact

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/internal/configerr"
)

const pemKey = `-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEA7bq3v1WkNAlFyPZ3yZtTeXXa
mH0vJ1fTQy1w8HA2uT4Y2Q==
-----END RSA PRIVATE KEY-----`

func TestDefaultRules(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		// positives
		{"private_key", "key:\n" + pemKey + "\ndone", "key:\n[REDACTED:private_key]\ndone"},
		{"private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----", "[REDACTED:private_key]"},
		{"private_key", "x -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI (truncated", "x [REDACTED:private_key]"},
		{"aws_access_key_id", "id AKIAIOSFODNN7EXAMPLE ok", "id [REDACTED:aws_access_key_id] ok"},
		{"aws_access_key_id", "ASIAY34FZKBOKMUTVV7A", "[REDACTED:aws_access_key_id]"},
		{"aws_secret_access_key", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n", "[REDACTED:aws_secret_access_key]\n"},
		{"aws_secret_access_key", `"AWS_SECRET_ACCESS_KEY": "abc/def+ghi"`, `"[REDACTED:aws_secret_access_key]`},
		{"authorization", "Authorization: Bearer eyJhbGciOi.eyJzdWIi.SflKxw\n", "[REDACTED:authorization]\n"},
		{"authorization", "authorization: basic dXNlcjpwYXNz", "[REDACTED:authorization]"},
		{"url_password", "GET https://admin:s3cr3t@db.example.com/x", "GET [REDACTED:url_password]db.example.com/x"},
		{"url_password", "redis://:hunter2@cache:6379", "[REDACTED:url_password]cache:6379"},
		{"slack_token", "token xoxb-123456-abcdef-XYZ", "token [REDACTED:slack_token]"},
		{"slack_token", "xoxp-1-2-3", "[REDACTED:slack_token]"},
		{"github_token", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED:github_token]"},
		{"github_token", "gho_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 x", "[REDACTED:github_token] x"},
		{"github_token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "[REDACTED:github_token]"},
		{"api_key", "OPENAI=sk-proj-abcdefghijklmnopqrstuv123", "OPENAI=[REDACTED:api_key]"},
		{"api_key", "sk_live_abcdefghijklmnopqrstuvwx", "[REDACTED:api_key]"},
		{"password", "password=hunter2 next", "[REDACTED:password] next"},
		{"password", "db passwd: 'correct horse'", "db [REDACTED:password]"},
		{"password", `PASSWORD="a b c"`, `[REDACTED:password]`},
		// (?i) matches ſ as s and the Kelvin sign as k; the prefilter must too.
		{"password", "paſſword=hunter2", "[REDACTED:password]"},
		{"aws_secret_access_key", "aws_ſecret_access_\u212aey=x", "[REDACTED:aws_secret_access_key]"},
		{"password", "a\nb password=1 c\npassword=2", "a\nb [REDACTED:password] c\n[REDACTED:password]"},
		// negatives: text that looks close but holds no secret
		{"none", "AKIAIOSFODNN7EXAMPL", "AKIAIOSFODNN7EXAMPL"},
		{"none", "XAKIAIOSFODNN7EXAMPLEX", "XAKIAIOSFODNN7EXAMPLEX"},
		{"none", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----"},
		{"none", "set aws_secret_access_key in the profile", "set aws_secret_access_key in the profile"},
		{"none", "Authorization: required", "Authorization: required"},
		{"none", "see https://example.com/a:b@c and http://host:8080/", "see https://example.com/a:b@c and http://host:8080/"},
		{"none", "xoxz-123 and xoxb", "xoxz-123 and xoxb"},
		{"none", "ghp_short gho_", "ghp_short gho_"},
		{"none", "task-sk-12 and disk-usage", "task-sk-12 and disk-usage"},
		{"none", "password:\nnext line", "password:\nnext line"},
		{"none", "forgot your password? reset it", "forgot your password? reset it"},
		{"none", " 10:42:01 up 3 days,  load average: 0.00, 0.01, 0.05", " 10:42:01 up 3 days,  load average: 0.00, 0.01, 0.05"},
	}
	r, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.RedactString(tt.in); got != tt.want {
				t.Errorf("Redact(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRedactReturnsInputWhenClean(t *testing.T) {
	r, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := []byte("Filesystem Size Used\n/dev/root 8G 2G\n")
	if out := r.Redact(in); &out[0] != &in[0] {
		t.Fatal("clean input was copied")
	}
	var nilR *Redactor
	if got := nilR.RedactString("AKIAIOSFODNN7EXAMPLE"); got != "AKIAIOSFODNN7EXAMPLE" {
		t.Fatalf("nil Redactor changed its input: %q", got)
	}
}

func TestRedactionsCounted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r, err := New(DefaultRules(), reg)
	if err != nil {
		t.Fatal(err)
	}
	r.RedactString("AKIAIOSFODNN7EXAMPLE and ASIAY34FZKBOKMUTVV7A, password=x")
	if got := testutil.ToFloat64(r.counts.WithLabelValues("aws_access_key_id")); got != 2 {
		t.Errorf("aws_access_key_id count = %v, want 2", got)
	}
	if got := testutil.ToFloat64(r.counts.WithLabelValues("password")); got != 1 {
		t.Errorf("password count = %v, want 1", got)
	}
	// Every rule has a series from the start, so rate() sees the first one.
	if n := testutil.CollectAndCount(reg, "autodiag_redactions_total"); n != len(DefaultRules()) {
		t.Errorf("%d series, want %d", n, len(DefaultRules()))
	}
	// A second Redactor on the same registry (a reload) shares the counter.
	r2, err := New([]Rule{{Name: "password", Pattern: `pw=\S+`}}, reg)
	if err != nil {
		t.Fatal(err)
	}
	r2.RedactString("pw=1")
	if got := testutil.ToFloat64(r.counts.WithLabelValues("password")); got != 2 {
		t.Errorf("password count after a reload = %v, want 2", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}

// A replacement can complete a match that was not one before: the URL's
// password holds a PEM block (spaces) that only its marker makes a match.
func TestRedactReachesFixedPoint(t *testing.T) {
	r, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := "x https://u:" + pemKey + "@host"
	got := r.RedactString(in)
	if strings.Contains(got, "https://u:") || strings.Contains(got, "BEGIN") {
		t.Fatalf("secret left: %q", got)
	}
	if again := r.RedactString(got); again != got {
		t.Fatalf("not a fixed point: %q -> %q", got, again)
	}
}

func TestConfigEffective(t *testing.T) {
	custom := Rule{Name: "vault_token", Pattern: `\bhvs\.[A-Za-z0-9]{20,}`}
	override := Rule{Name: "password", Pattern: `pw=\S+`}
	names := func(rs []Rule) string {
		var s []string
		for _, r := range rs {
			s = append(s, r.Name)
		}
		return strings.Join(s, ",")
	}
	all := names(DefaultRules())
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no list: defaults", Config{}, all},
		{"no list, keep defaults: defaults once", Config{KeepDefaults: true}, all},
		{"a list replaces the defaults", Config{Rules: []Rule{custom}}, "vault_token"},
		{"an empty list turns redaction off", Config{Rules: []Rule{}}, ""},
		{"keep defaults adds them after the list", Config{Rules: []Rule{custom}, KeepDefaults: true}, "vault_token," + all},
		{"a rule named like a default replaces it", Config{Rules: []Rule{override}, KeepDefaults: true},
			"password," + strings.TrimSuffix(all, ",password")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := names(tt.cfg.Effective()); got != tt.want {
				t.Errorf("Effective() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := Config{Rules: []Rule{
		{Name: "ok", Pattern: `secret=\S+`},
		{Name: "bad", Pattern: `secret=(\S+`},
		{Name: "", Pattern: `x{3}`},
		{Name: "ok", Pattern: `q{3}`},
		{Name: "Upper Case", Pattern: `z{3}`},
		{Name: "empty", Pattern: `a*`},
		{Name: "marker", Pattern: `REDACTED`},
		{Name: "nopattern"},
	}}
	err := cfg.Validate()
	want := map[string]string{
		"redact[1].pattern": `rule "bad"`,
		"redact[2].name":    "must be set",
		"redact[3].name":    "used twice",
		"redact[4].name":    "lower case",
		"redact[5].pattern": "empty string",
		"redact[6].pattern": "marker",
		"redact[7].pattern": "must be set",
	}
	got := map[string]string{}
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *configerr.Error
		if !errors.As(e, &ce) {
			t.Fatalf("not a configerr.Error: %v", e)
		}
		got[ce.Key] = ce.Err.Error()
	}
	for k, w := range want {
		if !strings.Contains(got[k], w) {
			t.Errorf("%s: got %q, want it to say %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("problems %v, want %d", got, len(want))
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := (Config{Rules: DefaultRules()}).Validate(); err != nil {
		t.Errorf("default rules: %v", err)
	}
	if _, err := New(cfg.Rules, nil); err == nil {
		t.Error("New accepted invalid rules")
	}
}

func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		pemKey, "AKIAIOSFODNN7EXAMPLE", "https://u:p@h", "password=x", "xoxb-1",
		"aws_secret_access_key=abc", "Authorization: Bearer abc", "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
		"sk-abcdefghijklmnopqrstuvwxyz", "x https://u:" + pemKey + "@host", "",
		"paſſword=x", "\u212a", "a\npassword=1 xoxb-2\nAKIAIOSFODNN7EXAMPLE",
	} {
		f.Add([]byte(s))
	}
	r, err := New(DefaultRules(), nil)
	if err != nil {
		f.Fatal(err)
	}
	// The same rules searched without the literal prefilter: the
	// prefilter may only skip work, never a match.
	plain, err := New(DefaultRules(), nil)
	if err != nil {
		f.Fatal(err)
	}
	plain.hints, plain.anyHints = make([][][]byte, len(plain.res)), false
	maxMarker := 0
	for _, m := range r.markers {
		maxMarker = max(maxMarker, len(m))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		orig := bytes.Clone(in)
		out, n := r.redact(in)
		if !bytes.Equal(in, orig) {
			t.Fatal("input modified")
		}
		if len(out) > len(in)+n*maxMarker {
			t.Fatalf("output %d bytes for %d of input and %d markers", len(out), len(in), n)
		}
		if want, _ := plain.redact(in); !bytes.Equal(out, want) {
			t.Fatalf("prefilter changed the result: %q, without it %q", out, want)
		}
		// No secret is left: scanning the output again finds nothing.
		if again, m := r.redact(out); m != 0 {
			t.Fatalf("output still matches: %q -> %q", out, again)
		}
	})
}

func BenchmarkRedact(b *testing.B) {
	r, err := New(DefaultRules(), nil)
	if err != nil {
		b.Fatal(err)
	}
	// A 64 KiB output (the default max_output) of ordinary lines, and the
	// same with a few secrets, like an env dump or a config file.
	var clean, secrets []byte
	for i := 0; len(clean) < 64<<10; i++ {
		line := "/dev/nvme0n1p1   8.0G  2.1G  5.9G  27% /var/lib/docker/overlay2\n"
		clean = append(clean, line...)
		secrets = append(secrets, line...)
		if i%200 == 0 {
			secrets = append(secrets, "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE password=hunter2\n"...)
		}
	}
	for _, bc := range []struct {
		name string
		in   []byte
	}{{"clean", clean}, {"secrets", secrets}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.in)))
			for b.Loop() {
				r.Redact(bc.in)
			}
		})
	}
}
