package redact

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// maxDefaultsHeap bounds what preparing the default rules and a Redactor
// of them keeps on the heap: about 0.45 MiB measured (the rule headers,
// gitleaks' ~1,500 generic stopwords as strings, the keyword table),
// where compiling every pattern up front kept about 16 MiB.
const maxDefaultsHeap = 3 << 20

// New with the default rules compiles none of the keyword-prefiltered
// patterns: an idle agent does not hold ~220 compiled regexps.
func TestNewDefaultsHeap(t *testing.T) {
	before := liveHeap()
	defs := prepareDefaults()
	r, err := newWith(DefaultRules(), nil, defs)
	if err != nil {
		t.Fatal(err)
	}
	after := liveHeap()
	runtime.KeepAlive(defs)
	runtime.KeepAlive(r)
	grew := int64(after) - int64(before)
	t.Logf("heap in use %d -> %d bytes (+%d)", before, after, grew)
	if grew > maxDefaultsHeap {
		t.Errorf("New(DefaultRules()) keeps %d bytes on the heap, want at most %d", grew, maxDefaultsHeap)
	}
}

// askedRules wraps the compilation of every lazily compiled rule of defs
// to record which ones a Redactor asked for.
type askedRules struct {
	mu    sync.Mutex
	names map[string]bool
}

func (a *askedRules) wrap(defs map[string]rule) {
	a.names = map[string]bool{}
	for k, c := range defs {
		orig, name := c.compiled, c.name
		c.compiled = func() *matcher {
			a.mu.Lock()
			a.names[name] = true
			a.mu.Unlock()
			return orig()
		}
		defs[k] = c
	}
}

func (a *askedRules) take() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.names
	a.names = map[string]bool{}
	return n
}

// A default rule with keywords is compiled when, and only when, one of
// its keywords occurs in the text searched, and redacts as the rule
// compiled up front does.
func TestDefaultRulesCompileOnFirstSearch(t *testing.T) {
	rules := DefaultRules()
	defs := prepareDefaults()
	var asked askedRules
	asked.wrap(defs)
	lazy, err := newWith(rules, nil, defs)
	if err != nil {
		t.Fatal(err)
	}
	eagerDefs := map[string]rule{}
	for _, r := range rules {
		c, err := build(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		eagerDefs[defaultKey(r)] = c
	}
	eager, err := newWith(rules, nil, eagerDefs)
	if err != nil {
		t.Fatal(err)
	}
	// hinted are the rules whose keywords hold in text; unhinted the rules
	// searched everywhere (none among the defaults today).
	var unhinted []string
	for _, c := range lazy.rules {
		if !c.hinted {
			unhinted = append(unhinted, c.name)
		}
	}
	hinted := func(texts ...string) map[string]bool {
		m := map[string]bool{}
		for _, r := range rules {
			for _, text := range texts {
				low := strings.ToLower(text)
				if slices.ContainsFunc(r.Keywords, func(k string) bool { return strings.Contains(low, strings.ToLower(k)) }) {
					m[r.Name] = true
				}
			}
		}
		return m
	}

	// Plain output holding no keyword of the fine-grained GitHub token
	// does not compile its rule; a token compiles it.
	const patRule = "github_fine_grained_pat"
	if !slices.ContainsFunc(rules, func(r Rule) bool { return r.Name == patRule }) {
		t.Fatalf("no default rule %s", patRule)
	}
	clean := "/dev/nvme0n1p1   8.0G  2.1G  5.9G  27% /var/lib/docker/overlay2\n"
	if got := lazy.RedactString(clean); got != clean {
		t.Fatalf("Redact(%q) = %q", clean, got)
	}
	if got := asked.take(); got[patRule] {
		t.Errorf("%s compiled for text without its keyword", patRule)
	}
	token := "token: github_pat_" + strings.Repeat("a1B2c3D4e5", 9)[:82] + "\n"
	if got, want := lazy.RedactString(token), eager.RedactString(token); got != want || !strings.Contains(got, Marker(patRule)) {
		t.Errorf("Redact(%q) = %q, compiled up front %q", token, got, want)
	}
	if got := asked.take(); !got[patRule] {
		t.Errorf("%s not compiled for text holding its keyword", patRule)
	}

	// Over the whole corpus, each text compiles exactly the rules one of
	// whose keywords it (or the output rescanned) holds, and redacts as
	// the eager rules do.
	texts := loadLookalikes(t)
	for _, s := range loadSecrets(t) {
		texts = append(texts, s.text())
	}
	for _, text := range texts {
		got := lazy.RedactString(text)
		if want := eager.RedactString(text); got != want {
			t.Errorf("Redact(%q)\n lazy  %q\n eager %q", text, got, want)
		}
		want := hinted(text, got)
		for _, name := range unhinted {
			want[name] = true
		}
		for name := range asked.take() {
			if !want[name] && !containsAny([]byte(text), foldTraps) {
				t.Errorf("%q compiled rule %s, which holds none of its keywords", text, name)
			}
		}
	}
	for k, c := range defs {
		if got, want := c.compiled().re.String(), eagerDefs[k].compiled().re.String(); got != want {
			t.Errorf("rule %s compiled %q, up front %q", c.name, got, want)
		}
	}
}

// Redactors on many goroutines compile a rule once, without a race
// (go test -race).
func TestDefaultRulesCompileConcurrently(t *testing.T) {
	r, err := newWith(DefaultRules(), nil, prepareDefaults())
	if err != nil {
		t.Fatal(err)
	}
	in := "AWS_ACCESS_KEY_ID=AKIAQYLPMN5HHHFPZAM2 password=" + Marker("secret_assignment") + "\n"
	want := "AWS_ACCESS_KEY_ID=" + Marker("aws_access_token") + " password=" + Marker("secret_assignment") + "\n"
	var wg sync.WaitGroup
	outs := make([]string, 8)
	for i := range outs {
		wg.Go(func() { outs[i] = r.RedactString(in) })
	}
	wg.Wait()
	for i, got := range outs {
		if got != want {
			t.Errorf("goroutine %d: %q, want %q", i, got, want)
		}
	}
}
