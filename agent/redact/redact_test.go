package redact

import (
	"bytes"
	"errors"
	"fmt"
	"os"
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

// The shapes of the adversarial list: each line must lose its secret
// (the part after "=" or the token itself) and keep its key.
func TestDefaultRules(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"private_key", "key:\n" + pemKey + "\ndone", "key:\n[REDACTED:private_key]\ndone"},
		{"private_key cut", "x -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEI (truncated", "x [REDACTED:private_key_block]"},
		{"github_pat", "token github_pat_11QWERTYU0123456789_mnbvcxzlkjhgfdsapoiuytrewq0123456789QAZWSXEDCRFVTGBYHNUJMIKOLP", "token [REDACTED:github_fine_grained_pat]"},
		{"DB_PASSWORD", "DB_PASSWORD=hunter2", "DB_PASSWORD=[REDACTED:secret_assignment]"},
		{"PGPASSWORD", "PGPASSWORD=hunter2 psql", "PGPASSWORD=[REDACTED:secret_assignment] psql"},
		{"MYSQL_PWD", "MYSQL_PWD=hunter2", "MYSQL_PWD=[REDACTED:secret_assignment]"},
		{"REDIS_PASSWORD", `REDIS_PASSWORD="a b c"`, `REDIS_PASSWORD="[REDACTED:secret_assignment]"`},
		{"KEY_AKIA", "KEY_AKIAQYLPMN5HHHFPZAM2", "KEY_[REDACTED:aws_access_key_id]"},
		{"Credential", "Credential%3DAKIAQYLPMN5HHHFPZAM2%2F2026", "Credential%3D[REDACTED:aws_access_key_id]%2F2026"},
		{"url password", "redis://:hunter2@cache:6379", "redis://:[REDACTED:url_password]@cache:6379"},
		{"url password no over-redaction", "xxxxredis://:pw@h", "xxxxredis://:[REDACTED:url_password]@h"},
		{"imds", `"SecretAccessKey" : "wJalrXUtnFEMIK7MDENGbPxRfiCYzzzzzzzzzzzz",`, `"SecretAccessKey" : "[REDACTED:generic_api_key]",`},
		{"imds token", `"Token" : "IQoJb3JpZ2luX2VjEXAMPLE123",`, `"Token" : "[REDACTED:token_assignment]",`},
		{"session token", "AWS_SESSION_TOKEN=IQoJb3JpZ2luX2VjEXAMPLE123", "AWS_SESSION_TOKEN=[REDACTED:token_assignment]"},
		{"x-api-key", "X-Api-Key: 0123456789abcdef", "X-Api-Key: [REDACTED:generic_api_key]"},
		{"cookie", "Cookie: sid=abc; theme=dark", "Cookie: [REDACTED:secret_header]"},
		{"flag", "mysqladmin --password hunter2 status", "mysqladmin --password [REDACTED:secret_flag] status"},
		{"authorization", "Authorization: Bearer abc.def.ghi", "Authorization: Bearer [REDACTED:authorization]"},
		// (?i) matches ſ as s and the Kelvin sign as k; the prefilter must too.
		{"fold", "paſſword=hunter2", "paſſword=[REDACTED:secret_assignment]"},
		// negatives
		{"none", "XAKIAIOSFODNN7EXAMPLEX", "XAKIAIOSFODNN7EXAMPLEX"},
		{"none", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----"},
		{"none", "Authorization: required", "Authorization: required"},
		{"none", "PWD=/root OLDPWD=/", "PWD=/root OLDPWD=/"},
		{"none", "password:\nnext line", "password:\nnext line"},
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

// Every default rule compiles, matches neither the empty string nor any
// marker, and gitleaks' data parses.
func TestDefaultRulesLoad(t *testing.T) {
	rules := DefaultRules()
	if len(rules) < 200 {
		t.Fatalf("%d default rules", len(rules))
	}
	var markers []string
	for _, r := range rules {
		markers = append(markers, Marker(r.Name))
	}
	for _, r := range rules {
		if _, err := build(r, markers); err != nil {
			t.Error(err)
		}
	}
}

// RulesVersion names the gitleaks release go.mod requires.
func TestRulesVersion(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if want := RulesSource + " " + RulesVersion; !strings.Contains(string(b), want) {
		t.Errorf("go.mod does not require %s", want)
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
	// Empty text (every success's reason and detail, a quiet run's
	// output) is redacted at every task's end: it costs no allocation.
	if n := testing.AllocsPerRun(10, func() { r.RedactString(""); r.Redact([]byte{}) }); n != 0 {
		t.Fatalf("redacting empty text allocates %v times", n)
	}
	if got := r.Redact([]byte{}); got == nil || len(got) != 0 {
		t.Fatalf("Redact(empty) = %#v, want the empty input back", got)
	}
}

func TestRedactionsCounted(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r, err := New(DefaultRules(), reg)
	if err != nil {
		t.Fatal(err)
	}
	r.RedactString("AKIAQYLPMN5HHHFPZAM2 and ASIAY34FZKBOKMUTVV7A, password=x")
	if got := testutil.ToFloat64(r.counts.WithLabelValues("aws_access_token")); got != 2 {
		t.Errorf("aws_access_token count = %v, want 2", got)
	}
	if got := testutil.ToFloat64(r.counts.WithLabelValues("secret_assignment")); got != 1 {
		t.Errorf("secret_assignment count = %v, want 1", got)
	}
	// Every rule, and the known values, has a series from the start, so
	// rate() sees the first one.
	if n := testutil.CollectAndCount(reg, "autodiag_redactions_total"); n != len(DefaultRules())+1 {
		t.Errorf("%d series, want %d", n, len(DefaultRules())+1)
	}
	// A second Redactor on the same registry (a reload) shares the counter.
	r2, err := New([]Rule{{Name: "secret_assignment", Pattern: `pw=\S+`}}, reg)
	if err != nil {
		t.Fatal(err)
	}
	r2.RedactString("pw=1")
	if got := testutil.ToFloat64(r.counts.WithLabelValues("secret_assignment")); got != 2 {
		t.Errorf("secret_assignment count after a reload = %v, want 2", got)
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
	if strings.Contains(got, "BEGIN") || strings.Contains(got, "MIIE") {
		t.Fatalf("secret left: %q", got)
	}
	if again := r.RedactString(got); again != got {
		t.Fatalf("not a fixed point: %q -> %q", got, again)
	}
}

// The keyword scan skips the markers a pass wrote, and only those: output
// that holds "[REDACTED:" (a log line an attacker wrote to) must not hide
// the keywords of what follows up to the next ']'.
func TestMarkerLookalikeHidesNothing(t *testing.T) {
	r, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, want string }{
		{"[REDACTED:\npassword=hunter2\n]", "[REDACTED:\npassword=[REDACTED:secret_assignment]\n]"},
		{"x [REDACTED: password=hunter2 ]", "x [REDACTED: password=[REDACTED:secret_assignment] ]"},
		{"[redacted: AWS_ACCESS_KEY_ID=AKIAQYLPMN5HHHFPZAM2 ]", "[redacted: AWS_ACCESS_KEY_ID=[REDACTED:aws_access_token] ]"},
		{"[REDACTED:nosuchrule] password=hunter2", "[REDACTED:nosuchrule] password=[REDACTED:secret_assignment]"},
		// A marker of a rule stays as it is, and its name opens no rule.
		{"[REDACTED:secret_assignment] password=hunter2", "[REDACTED:secret_assignment] password=[REDACTED:secret_assignment]"},
	}
	for _, tt := range tests {
		if got := r.RedactString(tt.in); got != tt.want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
	s := r.scan([]byte("[REDACTED:secret_assignment] [REDACTED:aws_access_token]"))
	for i, h := range s.hits {
		if len(h) > 0 {
			t.Errorf("rule %s opened by a marker's name at %v", r.rules[i].name, h)
		}
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
		"api_key=abcdef0123456789abcdef0123456789 api_key=abcdef0123456789abcdef0123456789 --mount=type=secret,",
		"password=a password=b\npassword=c token=Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OQ",
		"[REDACTED:\npassword=x\n]", "[redacted:secret_assignment] token=Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OQ",
	} {
		f.Add([]byte(s))
	}
	r, err := New(DefaultRules(), nil)
	if err != nil {
		f.Fatal(err)
	}
	maxMarker := 0
	for _, c := range r.rules {
		maxMarker = max(maxMarker, len(c.marker))
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
		// The same as the algorithm before line bounds were remembered.
		if want, wn := r.legacyRedact(in); !bytes.Equal(out, want) || n != wn {
			t.Fatalf("redact(%q) = %q (%d), the reference %q (%d)", in, out, n, want, wn)
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
	// same with a few secrets, like an env dump or a config file; and a
	// 1 MiB one with secrets, whose redaction must stay under 5 % of a 1 s
	// diagnostic (50 ms).
	gen := func(size int, withSecrets bool) []byte {
		var out []byte
		for i := 0; len(out) < size; i++ {
			out = append(out, "/dev/nvme0n1p1   8.0G  2.1G  5.9G  27% /var/lib/docker/overlay2\n"...)
			if withSecrets && i%200 == 0 {
				out = append(out, "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE password=hunter2\n"...)
			}
		}
		return out
	}
	cases := []struct {
		name string
		in   []byte
	}{{"clean", gen(64<<10, false)}, {"secrets", gen(64<<10, true)}, {"secrets_1MiB", gen(1<<20, true)}}
	// Hostile output, every line (or the whole text) a candidate: what a
	// diagnostic prints when it dumps attacker-influenced data. The cost
	// must grow linearly with the size.
	for _, h := range hostileShapes {
		for _, size := range []int{64 << 10, 1 << 20} {
			cases = append(cases, struct {
				name string
				in   []byte
			}{fmt.Sprintf("hostile_%s_%dKiB", h.name, size>>10), repeatTo(h.line, size)})
		}
	}
	// The worst found: every rule's keywords on every line, so that every
	// rule searches all of it (about 30 times the shapes above; 64 KiB
	// only, to keep the benchmark short).
	var words []string
	for _, rl := range DefaultRules() {
		words = append(words, rl.Keywords...)
	}
	cases = append(cases, struct {
		name string
		in   []byte
	}{"hostile_all_keywords_64KiB", repeatTo(strings.Join(words, " ")+"\n", 64<<10)})
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			// The rules its keywords open compile outside the timing
			// (b.Loop starts it): -benchtime=3x measures the search.
			r.Redact(bc.in[:min(len(bc.in), 64<<10)])
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.in)))
			for b.Loop() {
				r.Redact(bc.in)
			}
		})
	}
}

// hostileShapes are lines that, repeated, make every part of a text a
// candidate of some rule.
var hostileShapes = []struct{ name, line string }{
	{"password_run", "password" + strings.Repeat("a", 200) + "="}, // no line end
	{"words", "key token secret password api auth "},
	{"api_key", "api_key=abcdef0123456789abcdef0123456789\n"},
	// The same on one line: a rule's line was read again for every match.
	{"api_key_one_line", "api_key=abcdef0123456789abcdef0123456789 "},
	{"token", "token=x "},
	{"json_secret", `"secret":"`},
}

// repeatTo is line repeated up to size bytes (the last copy cut).
func repeatTo(line string, size int) []byte {
	return []byte(strings.Repeat(line, size/len(line)+1)[:size])
}
