package redact

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/configerr"
)

// Rule is one secret pattern: every match of Pattern becomes
// [REDACTED:<Name>].
type Rule struct {
	// Name labels the marker and the metric: lower case letters, digits
	// and underscores.
	Name string `yaml:"name"`
	// Pattern is an RE2 regular expression (Go regexp syntax). It must not
	// match the empty string, nor any marker.
	Pattern string `yaml:"pattern"`
}

// DefaultRules are the rules used when the configuration names none. Order
// matters where two rules match at the same position: the first wins, so
// the specific rules come before the general ones.
func DefaultRules() []Rule {
	return []Rule{
		// A truncated output may hold a BEGIN without its END: everything
		// after the BEGIN is redacted then.
		{Name: "private_key", Pattern: `-----BEGIN[ A-Z0-9]*PRIVATE KEY-----(?:[\s\S]*?-----END[ A-Z0-9]*PRIVATE KEY-----|[\s\S]*)`},
		{Name: "aws_access_key_id", Pattern: `\b(?:AKIA|ASIA)[A-Z0-9]{16}\b`},
		{Name: "aws_secret_access_key", Pattern: `(?i)aws_?secret_?access_?key["']?[ \t]*[=:][ \t]*["']?[^\s"',;]+["']?`},
		{Name: "authorization", Pattern: `(?i)\bauthorization["']?[ \t]*[=:][ \t]*["']?(?:bearer|basic)[ \t]+[A-Za-z0-9._~+/=-]+`},
		{Name: "url_password", Pattern: `\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@`},
		{Name: "slack_token", Pattern: `\bxox[abprs]-[A-Za-z0-9-]+`},
		{Name: "github_token", Pattern: `\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})`},
		{Name: "api_key", Pattern: `\bsk(?:-|_live_|_test_)[A-Za-z0-9_-]{20,}`},
		{Name: "password", Pattern: `(?i)\b(?:password|passwd|pwd)["']?[ \t]*[=:][ \t]*(?:"[^"\n]*"|'[^'\n]*'|[^\s"',;&]+)`},
	}
}

// hints are, for each default pattern, lower-case ASCII strings one of
// which any match contains (in any case). A text holding none of them
// cannot match, and a search for a literal is two orders of magnitude
// faster than Go's regexp engine on a pattern without a literal prefix:
// most outputs hold no secret, and then Redact costs an ASCII lower-casing
// and a few bytes.Index (BenchmarkRedact/clean against /secrets).
var hints = func() map[string][][]byte {
	words := map[string][]string{
		"private_key":           {"private key"},
		"aws_access_key_id":     {"akia", "asia"},
		"aws_secret_access_key": {"secret"},
		"authorization":         {"authorization"},
		"url_password":          {"://"},
		"slack_token":           {"xox"},
		"github_token":          {"gh"},
		"api_key":               {"sk-", "sk_"},
		"password":              {"password", "passwd", "pwd"},
	}
	m := map[string][][]byte{}
	for _, r := range DefaultRules() {
		for _, w := range words[r.Name] {
			m[r.Pattern] = append(m[r.Pattern], []byte(w))
		}
	}
	return m
}()

// oneLine are the default patterns whose matches never span a line end,
// so a match lies on a line that holds one of its hints: only such lines
// are searched with the regexp. (private_key spans lines; its pattern
// starts with a literal, which Go's regexp finds fast by itself.)
var oneLine = func() map[string]bool {
	m := map[string]bool{}
	for _, r := range DefaultRules() {
		if r.Name != "private_key" {
			m[r.Pattern] = true
		}
	}
	return m
}()

// foldTraps are the two non-ASCII letters that (?i) matches as ASCII ones
// (U+017F ſ as s, U+212A Kelvin sign as k), which an ASCII lower-casing
// does not see; a text holding one is searched without hints.
var foldTraps = [][]byte{[]byte("\u017f"), []byte("\u212a")}

// asciiLower is src with A-Z mapped to a-z: the same length, so an index
// into it is an index into src.
func asciiLower(src []byte) []byte {
	out := make([]byte, len(src))
	for i, c := range src {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// Config is what the results section of the configuration file says
// about redaction; the agent embeds it inline there, so its keys are
// results.redact and results.redact_defaults.
type Config struct {
	// Rules replace the defaults when the file sets a list (an empty list
	// turns redaction off unless KeepDefaults is set); nil means
	// DefaultRules.
	Rules []Rule `yaml:"redact"`
	// KeepDefaults adds the DefaultRules to Rules; a rule in Rules with the
	// name of a default one replaces that default.
	KeepDefaults bool `yaml:"redact_defaults"`
}

// Effective is the list of rules the configuration means.
func (c Config) Effective() []Rule {
	if c.Rules == nil {
		return DefaultRules()
	}
	out := append([]Rule(nil), c.Rules...)
	if !c.KeepDefaults {
		return out
	}
	named := map[string]bool{}
	for _, r := range c.Rules {
		named[r.Name] = true
	}
	for _, d := range DefaultRules() {
		if !named[d.Name] {
			out = append(out, d)
		}
	}
	return out
}

// Validate reports every problem of the configured rules at once, as
// *configerr.Error with keys relative to the results section
// ("redact[2].pattern").
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	var markers []string
	for _, r := range c.Effective() {
		markers = append(markers, Marker(r.Name))
	}
	for i, r := range c.Rules {
		key := fmt.Sprintf("redact[%d]", i)
		switch {
		case r.Name == "":
			errs = append(errs, configerr.Errorf(key+".name", "must be set"))
		case !validName.MatchString(r.Name):
			errs = append(errs, configerr.Errorf(key+".name", "%q: use lower case letters, digits and _ (it labels a metric)", r.Name))
		case seen[r.Name]:
			errs = append(errs, configerr.Errorf(key+".name", "%q is used twice", r.Name))
		}
		seen[r.Name] = true
		if _, err := compile(r, markers); err != nil {
			errs = append(errs, &configerr.Error{Key: key + ".pattern", Err: err})
		}
	}
	return errors.Join(errs...)
}

var validName = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

// Problems that make a pattern unusable.
var (
	ErrEmptyMatch    = errors.New("matches the empty string")
	ErrMatchesMarker = errors.New("matches a redaction marker")
)

// compile checks that r's pattern is usable beside rules whose markers
// are given: a rule matching a marker would redact its own output again.
func compile(r Rule, markers []string) (*regexp.Regexp, error) {
	if r.Pattern == "" {
		return nil, errors.New("must be set")
	}
	re, err := regexp.Compile(r.Pattern)
	if err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	if re.MatchString("") {
		return nil, fmt.Errorf("rule %q: %w", r.Name, ErrEmptyMatch)
	}
	for _, m := range markers {
		if re.MatchString(m) {
			return nil, fmt.Errorf("rule %q: %w %s", r.Name, ErrMatchesMarker, m)
		}
	}
	return re, nil
}

// Marker is what a match of the rule named name becomes.
func Marker(name string) string { return "[REDACTED:" + name + "]" }

// maxPasses bounds how often Redact rescans its own output. A replacement
// can complete a match that was not one before (a \b next to a marker, a
// URL whose password held a PEM block with spaces); each pass removes
// input bytes, so a few passes reach the fixed point on real output.
const maxPasses = 4

// Redactor applies a list of rules. It is safe for concurrent use; a nil
// *Redactor returns its input unchanged.
type Redactor struct {
	res      []*regexp.Regexp
	hints    [][][]byte // per rule; nil: always search the whole text
	oneLine  []bool     // per rule: with hints, search only lines holding one
	anyHints bool
	names    []string
	markers  [][]byte
	counts   *prometheus.CounterVec
}

// New compiles rules into a Redactor and registers
// autodiag_redactions_total on reg (nil: not registered). A Redactor built
// again on the same registry (a reload) shares the counter.
func New(rules []Rule, reg prometheus.Registerer) (*Redactor, error) {
	if err := (Config{Rules: rules}).Validate(); err != nil {
		return nil, fmt.Errorf("redact: %w", err)
	}
	r := &Redactor{counts: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "autodiag_redactions_total",
		Help: "Secrets replaced in diagnostic output, by redaction rule.",
	}, []string{"name"})}
	if reg != nil {
		if err := reg.Register(r.counts); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("redact: register metrics: %w", err)
			}
			r.counts = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	for _, rule := range rules {
		r.res = append(r.res, regexp.MustCompile(rule.Pattern)) // validated above
		r.hints = append(r.hints, hints[rule.Pattern])
		r.oneLine = append(r.oneLine, oneLine[rule.Pattern])
		r.anyHints = r.anyHints || hints[rule.Pattern] != nil
		r.names = append(r.names, rule.Name)
		r.markers = append(r.markers, []byte(Marker(rule.Name)))
		r.counts.WithLabelValues(rule.Name)
	}
	return r, nil
}

// Redact returns src with every match replaced by its marker. When
// nothing matches it returns src itself; otherwise a new slice, at most
// len(src) plus the markers long. src is never modified.
func (r *Redactor) Redact(src []byte) []byte {
	out, _ := r.redact(src)
	return out
}

// RedactString is Redact for a string.
func (r *Redactor) RedactString(s string) string {
	out, n := r.redact([]byte(s))
	if n == 0 {
		return s
	}
	return string(out)
}

// redact returns the redacted text and how many replacements it made.
func (r *Redactor) redact(src []byte) ([]byte, int) {
	if r == nil || len(r.res) == 0 {
		return src, 0
	}
	total := 0
	for range maxPasses {
		out, n := r.pass(src)
		if n == 0 {
			break
		}
		src, total = out, total+n
	}
	return src, total
}

// pass replaces the matches of one scan: the leftmost match of any rule
// (the first rule on a tie), then the next one after it. Each rule is its
// own small regexp searched ahead once and remembered, which is many times
// faster than one alternation of all rules, whose NFA is as large as all
// of them together. Memory is the output plus one match per rule.
func (r *Redactor) pass(src []byte) ([]byte, int) {
	var lower []byte // nil: search every rule over the whole text
	if r.anyHints && !containsAny(src, foldTraps) {
		lower = asciiLower(src)
	}
	next := make([][2]int, len(r.res)) // next match of each rule at or after the last one; -1: none
	for i := range r.res {
		next[i] = r.find(i, src, lower, 0)
	}
	var buf bytes.Buffer
	n, last := 0, 0
	for {
		rule := -1
		for i, m := range next {
			if m[0] >= 0 && (rule < 0 || m[0] < next[rule][0]) {
				rule = i
			}
		}
		if rule < 0 {
			break
		}
		start, end := next[rule][0], next[rule][1]
		if n == 0 {
			buf.Grow(len(src) + len(r.markers[rule]))
		}
		buf.Write(src[last:start])
		buf.Write(r.markers[rule])
		r.counts.WithLabelValues(r.names[rule]).Inc()
		n++
		last = end
		for i, m := range next {
			if m[0] >= 0 && m[0] < end {
				next[i] = r.find(i, src, lower, end)
			}
		}
	}
	if n == 0 {
		return src, 0
	}
	buf.Write(src[last:])
	return buf.Bytes(), n
}

var none = [2]int{-1, -1}

// find is the first match of rule i in src at or after pos, none if there
// is none. The search starts at pos as if the text began there: the byte
// before pos is the end of a match, which becomes a marker ending in ']',
// a non-word byte like the start of text, so \b behaves as it does in the
// output. lower (the text lower-cased, nil for none) lets a rule with
// hints skip text that holds none of them.
func (r *Redactor) find(i int, src, lower []byte, pos int) [2]int {
	if lower == nil || r.hints[i] == nil {
		return match(r.res[i], src, pos, len(src))
	}
	for pos <= len(src) {
		h := -1
		for _, w := range r.hints[i] {
			if j := bytes.Index(lower[pos:], w); j >= 0 && (h < 0 || pos+j < h) {
				h = pos + j
			}
		}
		if h < 0 {
			return none
		}
		if !r.oneLine[i] {
			return match(r.res[i], src, pos, len(src))
		}
		// A line end, like the start of text, is a non-word byte, so \b
		// behaves the same inside the line as in the whole text.
		from := pos + bytes.LastIndexByte(src[pos:h], '\n') + 1
		to := len(src)
		if j := bytes.IndexByte(src[h:], '\n'); j >= 0 {
			to = h + j
		}
		if m := match(r.res[i], src, from, to); m[0] >= 0 {
			return m
		}
		pos = to + 1
	}
	return none
}

// match is the first non-empty match of re in src[from:to], none if none.
func match(re *regexp.Regexp, src []byte, from, to int) [2]int {
	if from > to {
		return none
	}
	m := re.FindIndex(src[from:to])
	if m == nil || m[1] == m[0] { // an empty match cannot happen (Validate)
		return none
	}
	return [2]int{from + m[0], from + m[1]}
}

func containsAny(b []byte, subs [][]byte) bool {
	for _, s := range subs {
		if bytes.Contains(b, s) {
			return true
		}
	}
	return false
}
