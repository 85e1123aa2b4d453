package redact

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/configerr"
)

// Rule is one secret pattern: every match of Pattern (or of its secret
// group) becomes [REDACTED:<Name>].
type Rule struct {
	// Name labels the marker and the metric: lower case letters, digits
	// and underscores.
	Name string `yaml:"name"`
	// Pattern is an RE2 regular expression (Go regexp syntax). It must not
	// match the empty string, nor any marker. With capture groups, only
	// the secret group is replaced.
	Pattern string `yaml:"pattern"`
	// SecretGroup is the group that holds the secret; 0 means the first
	// group that took part in the match, or the whole match without one.
	SecretGroup int `yaml:"-"`
	// Entropy, when set, is the Shannon entropy (bits per byte) the secret
	// must exceed: a low-entropy value is a word, not a key.
	Entropy float64 `yaml:"-"`
	// Keywords prefilter the rule: text holding none of them (in any case)
	// is not searched, and a one-line pattern is searched only on lines
	// that hold one.
	Keywords []string `yaml:"-"`
	// Allow are gitleaks-style allowlists: a candidate any of them allows
	// is not a secret.
	Allow []Allow `yaml:"-"`
}

// Allow is one allowlist of a rule, gitleaks' [[rules.allowlists]].
type Allow struct {
	// All requires every criterion present to hold (condition AND);
	// otherwise one is enough.
	All bool
	// Target is what Regexes match: "" (the secret), "match" or "line".
	Target string
	// Regexes allow a candidate whose target matches one.
	Regexes []string
	// Stopwords allow a candidate whose secret holds one (lower case).
	Stopwords []string
	// Never marks an allowlist whose criteria cannot hold for output
	// (file paths, commits under AND).
	Never bool
}

// DefaultRules are the rules used when the configuration names none:
// gitleaks' default rules (RulesSource at RulesVersion) followed by the
// project's own (ownRules). Order matters where two rules match at the
// same position: the first wins.
func DefaultRules() []Rule {
	return append(append([]Rule(nil), gitleaksRules()...), ownRules()...)
}

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
	markers := []string{Marker(KnownRule)}
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
		case r.Name == KnownRule:
			errs = append(errs, configerr.Errorf(key+".name", "%q is reserved for the values of redact.values_env and the agent's credentials", r.Name))
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

// rule is a Rule ready to search.
type rule struct {
	name    string
	marker  []byte
	group   int
	entropy float64
	hinted  bool // has keywords: searched only where one occurs
	oneLine bool // with hints, search only lines holding one
	// compiled is the pattern and allowlists ready to match. A default
	// rule with keywords compiles them on its first search (about 220
	// gitleaks rules compiled up front held ~16 MiB of heap in an idle
	// agent); the others are compiled at load so that a bad pattern is a
	// configuration error. A sync.OnceValue: copies of the rule (every
	// Redactor, every reload) share one compilation.
	compiled func() *matcher
}

// matcher is what a rule compiles to.
type matcher struct {
	re    *regexp.Regexp
	allow []allow
}

type allow struct {
	all    bool
	target string
	res    []*regexp.Regexp
	// stopwords by their first two bytes (short ones under 0): gitleaks'
	// generic rule has about 1,500, and a candidate is looked up by its
	// own bytes rather than each word searched in it.
	stopwords map[uint16][][]byte
	never     bool
}

// keyword is one lower-case prefilter word and the rules it opens.
type keyword struct {
	word  []byte
	rules []int
}

// Redactor applies a list of rules. It is safe for concurrent use; a nil
// *Redactor returns its input unchanged.
type Redactor struct {
	rules []rule
	// pair finds the keywords starting at a position by the position's
	// two lower-cased bytes (0: none, else 1 + an index into groups): one
	// pass over the text finds every keyword of every rule (gitleaks'
	// rules have 2 to 34 byte keywords). A table, not a map: the lookup
	// runs for every byte of every output (BenchmarkRedact/clean).
	pair     []uint16
	groups   [][]keyword
	anyHints bool
	// markers are the markers of the rules, which the keyword scan skips;
	// maxMarker is the longest one's length.
	markers   map[string]bool
	maxMarker int
	counts    *prometheus.CounterVec
	// knownSrc gives the credential values redacted by value (SetKnown);
	// known caches their forms while the values stay the same.
	knownSrc func() []string
	known    atomic.Pointer[knownSet]
}

// compiledDefaults are the default rules prepared once: a reload or a
// second Redactor reuses them, and their lazy compilations.
var compiledDefaults = sync.OnceValue(prepareDefaults)

func prepareDefaults() map[string]rule {
	m := map[string]rule{}
	for _, r := range DefaultRules() {
		var c rule
		var err error
		if len(r.Keywords) > 0 {
			c, err = buildLazy(r)
		} else {
			c, err = build(r, nil)
		}
		if err != nil {
			panic(fmt.Sprintf("redact: default rule %s: %v", r.Name, err)) // TestDefaultRulesLoad
		}
		m[defaultKey(r)] = c
	}
	return m
}

func defaultKey(r Rule) string { return r.Name + "\x00" + r.Pattern }

// header is the part of a rule needed before its first search; oneLine
// comes from the parsed pattern, whose tree is then dropped.
func header(r Rule) (rule, error) {
	re, err := syntax.Parse(r.Pattern, syntax.Perl)
	if err != nil {
		return rule{}, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	return rule{name: r.Name, marker: []byte(Marker(r.Name)), group: r.SecretGroup,
		entropy: r.Entropy, hinted: len(r.Keywords) > 0, oneLine: oneLine(re)}, nil
}

// build compiles r now; markers are checked against its pattern (nil:
// trusted default rule, checked by a test).
func build(r Rule, markers []string) (rule, error) {
	re, err := compile(r, markers)
	if err != nil {
		return rule{}, err
	}
	c, err := header(r)
	if err != nil {
		return rule{}, err
	}
	m, err := compileMatcher(r, re)
	if err != nil {
		return rule{}, err
	}
	c.compiled = func() *matcher { return m }
	return c, nil
}

// buildLazy prepares a trusted default rule (TestDefaultRulesLoad
// compiles each one) whose pattern and allowlists compile on first use.
func buildLazy(r Rule) (rule, error) {
	c, err := header(r)
	if err != nil {
		return rule{}, err
	}
	c.compiled = sync.OnceValue(func() *matcher {
		m, err := compileMatcher(r, nil)
		if err != nil {
			panic(fmt.Sprintf("redact: default rule %s: %v", r.Name, err)) // TestDefaultRulesLoad
		}
		return m
	})
	return c, nil
}

// compileMatcher compiles r's allowlists, and its pattern unless re is
// given.
func compileMatcher(r Rule, re *regexp.Regexp) (*matcher, error) {
	if re == nil {
		var err error
		if re, err = regexp.Compile(r.Pattern); err != nil {
			return nil, fmt.Errorf("rule %q: %w", r.Name, err)
		}
	}
	m := &matcher{re: re}
	for _, a := range r.Allow {
		ca := allow{all: a.All, target: a.Target, never: a.Never}
		for _, p := range a.Regexes {
			are, err := regexp.Compile(p)
			if err != nil {
				return nil, fmt.Errorf("rule %q: allowlist: %w", r.Name, err)
			}
			ca.res = append(ca.res, are)
		}
		for _, w := range a.Stopwords {
			if ca.stopwords == nil {
				ca.stopwords = map[uint16][][]byte{}
			}
			w = strings.ToLower(w)
			k := uint16(0)
			if len(w) >= 2 {
				k = uint16(w[0])<<8 | uint16(w[1])
			}
			ca.stopwords[k] = append(ca.stopwords[k], []byte(w))
		}
		m.allow = append(m.allow, ca)
	}
	return m, nil
}

// oneLine reports whether every match of re lies within a line: nothing
// in it matches a line end together with other text ([\s'"] may stand
// between a key and its value, [\s\S] or [^"] may carry a secret across
// lines).
func oneLine(prog *syntax.Regexp) bool {
	ok := true
	var walk func(*syntax.Regexp)
	walk = func(n *syntax.Regexp) {
		switch n.Op {
		case syntax.OpAnyChar:
			ok = false
		case syntax.OpLiteral:
			if slices.Contains(n.Rune, '\n') {
				ok = false
			}
		case syntax.OpCharClass:
			if inClass(n.Rune, '\n') && (inClass(n.Rune, 'a') || inClass(n.Rune, '0') || inClass(n.Rune, '-')) {
				ok = false
			}
		}
		for _, s := range n.Sub {
			walk(s)
		}
	}
	walk(prog)
	return ok
}

func inClass(ranges []rune, c rune) bool {
	for i := 0; i+1 < len(ranges); i += 2 {
		if ranges[i] <= c && c <= ranges[i+1] {
			return true
		}
	}
	return false
}

// New compiles rules into a Redactor and registers
// autodiag_redactions_total on reg (nil: not registered). A Redactor built
// again on the same registry (a reload) shares the counter.
func New(rules []Rule, reg prometheus.Registerer) (*Redactor, error) {
	return newWith(rules, reg, compiledDefaults())
}

// newWith is New with the prepared default rules given.
func newWith(rules []Rule, reg prometheus.Registerer, defaults map[string]rule) (*Redactor, error) {
	r := &Redactor{pair: make([]uint16, 1<<16), counts: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "autodiag_redactions_total",
		Help: "Secrets replaced in diagnostic output, by redaction rule.",
	}, []string{"name"})}
	markers := []string{Marker(KnownRule)}
	for _, rl := range rules {
		markers = append(markers, Marker(rl.Name))
	}
	var errs []error
	seen := map[string]bool{}
	words := map[string][]int{}
	for i, rl := range rules {
		key := fmt.Sprintf("redact[%d]", i)
		switch {
		case !validName.MatchString(rl.Name):
			errs = append(errs, configerr.Errorf(key+".name", "%q: use lower case letters, digits and _ (it labels a metric)", rl.Name))
		case seen[rl.Name]:
			errs = append(errs, configerr.Errorf(key+".name", "%q is used twice", rl.Name))
		}
		seen[rl.Name] = true
		c, ok := defaults[defaultKey(rl)]
		if !ok {
			var err error
			if c, err = build(rl, markers); err != nil {
				errs = append(errs, &configerr.Error{Key: key + ".pattern", Err: err})
				continue
			}
		}
		r.rules = append(r.rules, c)
		for _, w := range rl.Keywords {
			w = strings.ToLower(w)
			if len(w) < 2 {
				// Too short to prefilter: the rule searches everywhere.
				r.rules[len(r.rules)-1].hinted = false
				continue
			}
			words[w] = append(words[w], len(r.rules)-1)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("redact: %w", err)
	}
	for _, w := range slices.Sorted(maps.Keys(words)) {
		k := uint16(w[0])<<8 | uint16(w[1])
		if r.pair[k] == 0 {
			r.groups = append(r.groups, nil)
			r.pair[k] = uint16(len(r.groups))
		}
		g := r.pair[k] - 1
		r.groups[g] = append(r.groups[g], keyword{word: []byte(w), rules: slices.Compact(words[w])})
		r.anyHints = true
	}
	if reg != nil {
		if err := reg.Register(r.counts); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, fmt.Errorf("redact: register metrics: %w", err)
			}
			r.counts = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	r.markers = map[string]bool{Marker(KnownRule): true}
	r.maxMarker = len(Marker(KnownRule))
	r.counts.WithLabelValues(KnownRule)
	for _, c := range r.rules {
		r.counts.WithLabelValues(c.name)
		r.markers[string(c.marker)] = true
		r.maxMarker = max(r.maxMarker, len(c.marker))
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
	// Empty text (a run's empty output, a success's reason and detail)
	// holds no secret: it skips the scan and what the scan allocates.
	if r == nil || len(src) == 0 {
		return src, 0
	}
	// The agent's own credentials first, whatever the rules.
	src, total := r.redactKnown(src)
	if len(r.rules) == 0 && r.knownSrc == nil {
		return src, total
	}
	for range maxPasses {
		out, n := r.pass(src)
		if n == 0 {
			break
		}
		src, total = out, total+n
	}
	// What an encoding hides (%3DAIza…, \u003cpassword\u003e…) is found
	// in the decoded text and replaced in the original.
	if out, n := r.redactDecoded(src); n > 0 {
		src, total = out, total+n
	}
	return src, total
}

// markerAt is the length of the marker of one of r's rules that b starts
// with, 0 if none.
func (r *Redactor) markerAt(b []byte) int {
	if !bytes.HasPrefix(b, markerStart) {
		return 0
	}
	j := bytes.IndexByte(b[:min(len(b), r.maxMarker)], ']')
	if j < 0 || !r.markers[string(b[:j+1])] {
		return 0
	}
	return j + 1
}

// scan is one pass's view of the text: where each rule's keywords occur.
type scan struct {
	src []byte
	// hits are, per hinted rule, the ascending positions of its keywords;
	// nil for a rule searched everywhere.
	hits [][]int
	// everywhere is set when the prefilter cannot be trusted (fold traps).
	everywhere bool
	// spans are, per rule, the candidates last listed (candidate).
	spans []*span
	// lines are, per rule, the line its keyword was last found on
	// (find): a rule asks about positions that never go back, so each
	// line's bounds are read once per rule, not once per question (a
	// long line of many matches was quadratic).
	lines []lineAt
}

// lineAt is the line holding the last position asked about: src[start:end]
// holds no line end, and end is the line end's index or len(src).
type lineAt struct {
	start, end int
	ok         bool
}

// at is the line holding p: its start, and the index of its line end (or
// len(src)). Asked about positions that do not go back, it reads each
// line once.
func (l *lineAt) at(src []byte, p int) (start, end int) {
	if !l.ok || p < l.start || p > l.end {
		l.start = bytes.LastIndexByte(src[:p], '\n') + 1
		l.end = len(src)
		if j := bytes.IndexByte(src[p:], '\n'); j >= 0 {
			l.end = p + j
		}
		l.ok = true
	}
	return l.start, l.end
}

func (r *Redactor) scan(src []byte) *scan {
	s := &scan{src: src, hits: make([][]int, len(r.rules)), spans: make([]*span, len(r.rules)), lines: make([]lineAt, len(r.rules))}
	if !r.anyHints || containsAny(src, foldTraps) {
		s.everywhere = true
		return s
	}
	lower := asciiLower(src)
	for i := 0; i+1 < len(lower); i++ {
		if src[i] == '[' {
			// A marker's rule name (secret_assignment, aws_access_token)
			// holds keywords but no secret: the rescan after a
			// replacement would search every rule again there. Only a
			// whole marker of these rules is skipped: "[REDACTED:" alone,
			// which output can hold, would hide the keywords up to the
			// next ']', lines away.
			if n := r.markerAt(src[i:]); n > 0 {
				i += n - 1
				continue
			}
		}
		g := r.pair[uint16(lower[i])<<8|uint16(lower[i+1])]
		if g == 0 {
			continue
		}
		for _, k := range r.groups[g-1] {
			if bytes.HasPrefix(lower[i:], k.word) {
				for _, ri := range k.rules {
					if h := s.hits[ri]; len(h) == 0 || h[len(h)-1] != i {
						s.hits[ri] = append(h, i)
					}
				}
			}
		}
	}
	return s
}

// pass replaces the matches of one scan: the leftmost match of any rule
// (the first rule on a tie), then the next one after it. Each rule is its
// own small regexp searched ahead once and remembered, which is many times
// faster than one alternation of all rules, whose NFA is as large as all
// of them together. Memory is the output plus one match per rule.
func (r *Redactor) pass(src []byte) ([]byte, int) {
	var buf bytes.Buffer
	n, last := 0, 0
	r.each(src, func(ri, start, end int) {
		if n == 0 {
			buf.Grow(len(src) + len(r.rules[ri].marker))
		}
		buf.Write(src[last:start])
		buf.Write(r.rules[ri].marker)
		r.counts.WithLabelValues(r.rules[ri].name).Inc()
		n++
		last = end
	})
	if n == 0 {
		return src, 0
	}
	buf.Write(src[last:])
	return buf.Bytes(), n
}

// each calls fn with every secret of one scan of src, in order: the rule
// whose marker replaces it and its bounds.
func (r *Redactor) each(src []byte, fn func(ri, start, end int)) {
	s := r.scan(src)
	next := make([][2]int, len(r.rules)) // next match of each rule at or after the last one; -1: none
	for i := range r.rules {
		next[i] = r.find(i, s, 0)
	}
	for {
		ri, end := pick(next)
		if ri < 0 {
			return
		}
		fn(ri, next[ri][0], end)
		for i, m := range next {
			if m[0] >= 0 && m[0] < end {
				next[i] = r.find(i, s, end)
			}
		}
	}
}

var none = [2]int{-1, -1}

// pick is the rule whose secret is replaced next and where the
// replacement ends: the leftmost secret (the longest of those starting
// there, then the first rule), run on through every secret that overlaps
// it. A shorter rule's match inside a longer token (glrt-… of a routable
// runner token, FLWSECK_TEST-… of a secret key) would otherwise leave the
// token's rest in the text, which no rule finds alone. ri < 0: none left.
func pick(next [][2]int) (ri, end int) {
	ri = -1
	for i, m := range next {
		if m[0] < 0 {
			continue
		}
		if ri < 0 || m[0] < next[ri][0] || m[0] == next[ri][0] && m[1] > next[ri][1] {
			ri = i
		}
	}
	if ri < 0 {
		return -1, 0
	}
	end = next[ri][1]
	for grown := true; grown; {
		grown = false
		for _, m := range next {
			if m[0] >= 0 && m[0] < end && m[1] > end {
				end, grown = m[1], true
			}
		}
	}
	return ri, end
}

// find is the secret of the first match of rule i in the text at or after
// pos, none if there is none. The search starts at pos as if the text
// began there: the byte before pos is the end of a match, which becomes a
// marker ending in ']', a non-word byte like the start of text, so \b
// behaves as it does in the output. A hinted rule skips text that holds
// none of its keywords.
func (r *Redactor) find(i int, s *scan, pos int) [2]int {
	c := &r.rules[i]
	src := s.src
	if s.everywhere || !c.hinted {
		return r.candidate(i, s, 0, len(src), pos)
	}
	hits := s.hits[i]
	for {
		k, _ := slices.BinarySearch(hits, pos)
		if k == len(hits) {
			return none
		}
		h := hits[k]
		// A line end, like the start of text, is a non-word byte, so \b
		// behaves the same inside the line as in the whole text. A match
		// holds its keyword, so it starts on the keyword's line at the
		// latest; a multi-line rule searches from there to the end.
		from, to := s.lines[i].at(src, h)
		if !c.oneLine {
			return r.candidate(i, s, from, len(src), pos)
		}
		if m := r.candidate(i, s, from, to, pos); m[0] >= 0 {
			return m
		}
		pos = to + 1
		if pos > len(src) {
			return none
		}
	}
}

// span is where a rule's candidates were last listed, and the secrets
// among them.
type span struct {
	from, to int
	secrets  [][2]int
}

// candidate is the first secret of rule i in src[from:to] that starts at
// or after pos. All matches of a range are found in one call and kept: a
// rule overtaken by another asks again after every replacement, and a new
// search per question would cost the rest of the line each time (Go's
// regexp clears state as long as its input per call), which made a long
// line of many candidates quadratic.
func (r *Redactor) candidate(i int, s *scan, from, to, pos int) [2]int {
	sp := s.spans[i]
	if sp == nil || sp.to != to || sp.from > from {
		// A rule lists one range at a time: the last one's memory is
		// reused (a long output of short lines lists one per line).
		if sp == nil {
			sp = &span{}
		}
		sp.from, sp.to, sp.secrets = from, to, sp.secrets[:0]
		c := &r.rules[i]
		cm := c.compiled()
		// Candidates come in order, so the lines of "line" allowlists are
		// read, and their regexps run, once per line rather than once per
		// candidate.
		var lines lineMemo
		for _, m := range cm.re.FindAllSubmatchIndex(s.src[from:to], -1) {
			if m[1] == m[0] { // an empty match cannot happen (Validate)
				continue
			}
			sec := secretSpan(m, c.group)
			if sec[0] < sec[1] && keep(c, cm, s.src, from, m, sec, &lines) {
				sp.secrets = append(sp.secrets, [2]int{from + sec[0], from + sec[1]})
			}
		}
		s.spans[i] = sp
	}
	k := sort.Search(len(sp.secrets), func(k int) bool { return sp.secrets[k][0] >= pos })
	if k == len(sp.secrets) {
		return none
	}
	return sp.secrets[k]
}

// secretSpan is the span of the secret in a submatch index: group g, or
// (g = 0) the first group that took part, or the whole match.
func secretSpan(m []int, g int) [2]int {
	if g > 0 && 2*g+1 < len(m) && m[2*g] >= 0 {
		return [2]int{m[2*g], m[2*g+1]}
	}
	if g == 0 {
		for k := 2; k+1 < len(m); k += 2 {
			if m[k] >= 0 && m[k+1] > m[k] {
				return [2]int{m[k], m[k+1]}
			}
		}
	}
	return [2]int{m[0], m[1]}
}

// lineMemo remembers, for one listing of candidates, the line around the
// last one and whether each "line" allowlist's regexps match it.
type lineMemo struct {
	first, last lineAt
	// start, end are the line the results are for (valid: any).
	start, end int
	// reOK holds, per allowlist (the first len(reOK)), 0 (not asked
	// yet), 1 (a regexp matches the line) or 2 (none does).
	reOK  [8]uint8
	valid bool
}

// lineRegexOK is whether one of a's regexps matches src[start:end], the
// line of allowlist k, remembered while the line stays the same.
func (lm *lineMemo) lineRegexOK(a allow, k int, src []byte, start, end int) bool {
	if k >= len(lm.reOK) {
		return regexOK(a, src[start:end])
	}
	if !lm.valid || lm.start != start || lm.end != end {
		lm.start, lm.end, lm.valid = start, end, true
		clear(lm.reOK[:])
	}
	if lm.reOK[k] == 0 {
		lm.reOK[k] = 2
		if regexOK(a, src[start:end]) {
			lm.reOK[k] = 1
		}
	}
	return lm.reOK[k] == 1
}

// keep reports whether a candidate is a secret: entropy high enough, and
// no allowlist allows it. lm carries what the listing's earlier candidates
// learnt about their line.
func keep(c *rule, cm *matcher, src []byte, from int, m []int, sec [2]int, lm *lineMemo) bool {
	secret := src[from+sec[0] : from+sec[1]]
	if bytes.HasPrefix(secret, markerStart) {
		// What an earlier match left.
		return false
	}
	if c.entropy > 0 && entropy(secret) <= c.entropy {
		return false
	}
	for k, a := range cm.allow {
		if a.never {
			continue
		}
		if a.target == "line" {
			// The line holding the match: from the start of its first
			// line to the end of its last.
			ls, _ := lm.first.at(src, from+m[0])
			_, le := lm.last.at(src, from+m[1])
			if allowedBy(a, len(a.res) > 0 && lm.lineRegexOK(a, k, src, ls, le), secret) {
				return false
			}
			continue
		}
		target := secret
		if a.target == "match" {
			target = src[from+m[0] : from+m[1]]
		}
		if allowed(a, target, secret) {
			return false
		}
	}
	return true
}

func allowed(a allow, target, secret []byte) bool {
	return allowedBy(a, regexOK(a, target), secret)
}

// regexOK is whether one of a's regexps matches target.
func regexOK(a allow, target []byte) bool {
	for _, re := range a.res {
		if re.Match(target) {
			return true
		}
	}
	return false
}

// allowedBy is whether a allows secret, given whether one of its regexps
// matched its target.
func allowedBy(a allow, reOK bool, secret []byte) bool {
	regex, stop := len(a.res) > 0, len(a.stopwords) > 0
	if !regex && !stop {
		return false
	}
	stopOK := false
	if stop {
		stopOK = hasStopword(a.stopwords, bytes.ToLower(secret))
	}
	if a.all {
		return (!regex || reOK) && (!stop || stopOK)
	}
	return reOK || stopOK
}

// hasStopword reports whether low holds one of words (keyed by their
// first two bytes, short ones under 0).
func hasStopword(words map[uint16][][]byte, low []byte) bool {
	for _, w := range words[0] {
		if bytes.Contains(low, w) {
			return true
		}
	}
	for i := 0; i+1 < len(low); i++ {
		for _, w := range words[uint16(low[i])<<8|uint16(low[i+1])] {
			if bytes.HasPrefix(low[i:], w) {
				return true
			}
		}
	}
	return false
}

// entropy is the Shannon entropy of b in bits per byte.
func entropy(b []byte) float64 {
	var counts [256]int
	for _, c := range b {
		counts[c]++
	}
	e := 0.0
	n := float64(len(b))
	for _, k := range counts {
		if k > 0 {
			p := float64(k) / n
			e -= p * math.Log2(p)
		}
	}
	return e
}

func containsAny(b []byte, subs [][]byte) bool {
	for _, s := range subs {
		if bytes.Contains(b, s) {
			return true
		}
	}
	return false
}
