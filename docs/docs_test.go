// Package docs holds the reference pages; its test keeps them and the code
// in step: every configuration key and every metric the code has is in its
// page, and the pages name nothing the code lacks.
package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/agenttest"
	"github.com/autodiag/autodiag/limiter"
)

// opaque are keys documented as one row whose type is described elsewhere:
// the walk does not look inside them.
var opaque = map[string]string{
	"report.limits": "the limits of limiter.rules[] (same syntax and engine)",
}

// schemaKey is one node of the configuration file's tree: a leaf (a value)
// or a section; leaf says which.
type schemaKey struct {
	path string
	leaf bool
}

// schema walks the configuration types by their yaml tags, as the decoder
// reads them: ",inline" fields join their parent, a slice of structs is
// `name[]`, pointers are followed, and durations, sizes, maps, slices of
// scalars and types that decode themselves (yaml.Unmarshaler: their row
// says what they take) are values.
func schema() []schemaKey {
	var out []schemaKey
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("yaml")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if opts == "inline" {
				walk(prefix, ft)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			path := prefix + name
			if _, ok := opaque[path]; ok {
				out = append(out, schemaKey{path, true})
				continue
			}
			switch {
			case reflect.PointerTo(ft).Implements(unmarshaler):
				out = append(out, schemaKey{path, true})
			case ft.Kind() == reflect.Struct && ft != reflect.TypeFor[time.Time]():
				out = append(out, schemaKey{path, false})
				walk(path+".", ft)
			case ft.Kind() == reflect.Slice && elemStruct(ft) != nil:
				out = append(out, schemaKey{path + "[]", false})
				walk(path+"[].", elemStruct(ft))
			default:
				out = append(out, schemaKey{path, true})
			}
		}
	}
	walk("", reflect.TypeFor[config.Config]())
	return out
}

var unmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

func elemStruct(t reflect.Type) reflect.Type {
	e := t.Elem()
	for e.Kind() == reflect.Pointer {
		e = e.Elem()
	}
	if e.Kind() == reflect.Struct {
		return e
	}
	return nil
}

var backticked = regexp.MustCompile("`([^`]+)`")

// docRow is one row of a key table: the keys its first cell names and
// every backticked span of the row.
type docRow struct {
	keys  []string
	spans string
}

// keyTables reads the rows of every `| Key |` table of the page. In a
// first cell naming several keys, a name without a dot after a dotted one
// is its sibling (`report.investigate.daily_tokens`, `daily_cost_usd`).
func keyTables(t *testing.T, page string) []docRow {
	t.Helper()
	src, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var rows []docRow
	in := false
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		if strings.HasPrefix(line, "| Key |") {
			in = !strings.Contains(line, "| What |")
			continue
		}
		cells := strings.Split(line, "|")
		if !in || len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		var r docRow
		parent := ""
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			k := m[1]
			if !strings.Contains(k, ".") && parent != "" {
				k = parent + k
			}
			if i := strings.LastIndex(k, "."); i >= 0 && parent == "" {
				parent = k[:i+1]
			}
			r.keys = append(r.keys, k)
		}
		for _, m := range backticked.FindAllStringSubmatch(line, -1) {
			r.spans += " " + m[1] + " "
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no key table", page)
	}
	return rows
}

// TestConfigurationPageHasEveryKey: every key of the configuration types is
// in docs/configuration.md, as a row of its own or, for the fields of a
// list entry or a small section, named in the row of its nearest
// documented parent (`limiter.rules[]` names `match`, `key`, `limits`…);
// and every key a row names is one the types have.
func TestConfigurationPageHasEveryKey(t *testing.T) {
	rows := keyTables(t, "configuration.md")
	documented := map[string]docRow{}
	for _, r := range rows {
		for _, k := range r.keys {
			documented[strings.TrimSuffix(k, "[]")] = r
		}
	}
	keys := schema()
	nodes := map[string]bool{}
	for _, k := range keys {
		nodes[strings.TrimSuffix(k.path, "[]")] = true
	}
	for _, k := range keys {
		path := strings.TrimSuffix(k.path, "[]")
		if _, ok := documented[path]; ok || !k.leaf {
			continue
		}
		// The nearest parent with a row must name the field.
		leaf := path[strings.LastIndexAny(path, ".")+1:]
		found := false
		for p := path; strings.Contains(p, "."); {
			p = strings.TrimSuffix(p[:strings.LastIndex(p, ".")], "[]")
			if r, ok := documented[p]; ok {
				found = regexp.MustCompile(`\b` + regexp.QuoteMeta(leaf) + `\b`).MatchString(r.spans)
				break
			}
		}
		if !found {
			t.Errorf("config key %s is in the code but not in docs/configuration.md (a row of its own, or named in its parent's row)", k.path)
		}
	}
	for _, r := range rows {
		for _, k := range r.keys {
			k = strings.TrimSuffix(k, "[]")
			if prefix, ok := strings.CutSuffix(k, ".*"); ok {
				if !nodes[prefix] {
					t.Errorf("docs/configuration.md names %s.*, but the code has no section %s", prefix, prefix)
				}
				continue
			}
			if !nodes[k] {
				t.Errorf("docs/configuration.md names config key %s, which the code does not have", k)
			}
		}
	}
}

// TestConfigurationPageHasOneTablePerSection: each top-level section of the
// file has its heading, so a reader finds `## redis` for `redis.*`.
func TestConfigurationPageHasOneTablePerSection(t *testing.T) {
	src, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range schema() {
		if k.leaf || strings.Contains(k.path, ".") || k.path == "admin_auth" {
			continue
		}
		section := strings.TrimSuffix(k.path, "[]")
		if !strings.Contains(string(src), "\n## "+section+"\n") {
			t.Errorf("docs/configuration.md has no section heading %q", "## "+section)
		}
	}
}

// registered lists the autodiag_ metric families reg registers.
func registered(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for n := range agenttest.RegisteredNames(t, reg) {
		if strings.HasPrefix(n, "autodiag_") {
			names[n] = true
		}
	}
	return names
}

// documentedMetrics reads every `autodiag_*` name in the first cell of the
// `| Metric | Type |` tables of docs/metrics.md.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	src, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	in := false
	for _, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		if strings.HasPrefix(line, "| Metric | Type |") {
			in = true
			continue
		}
		cells := strings.Split(line, "|")
		if !in || len(cells) < 3 {
			continue
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			if strings.HasPrefix(m[1], "autodiag_") {
				names[m[1]] = true
			}
		}
	}
	if len(names) == 0 {
		t.Fatal("docs/metrics.md has no metric table")
	}
	return names
}

// TestMetricsPageHasEveryMetric: every autodiag_* family a fully
// configured agent registers has a row in docs/metrics.md, and every row
// names a family the agent registers.
func TestMetricsPageHasEveryMetric(t *testing.T) {
	reg := registered(t, agenttest.OpenFull(t).Registry())
	docs := documentedMetrics(t)
	for _, n := range sortedKeys(reg) {
		if !docs[n] {
			t.Errorf("metric %s is registered by the agent but not in docs/metrics.md", n)
		}
	}
	for _, n := range sortedKeys(docs) {
		if !reg[n] {
			t.Errorf("docs/metrics.md documents %s, which the agent does not register", n)
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug is GitHub's anchor of a heading: lower case, punctuation dropped,
// spaces as dashes.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// anchors lists the headings of a Markdown file (outside code blocks).
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && !fence && strings.HasPrefix(line, "#") {
			out[slug(h)] = true
		}
	}
	return out
}

// TestReadmeLinksEveryPageAndLinksResolve: the README links every page of
// docs/, and every relative link of the README and of every Markdown file
// under docs/ names a file that exists and, for a Markdown file, a
// heading it has.
func TestReadmeLinksEveryPageAndLinksResolve(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if !strings.Contains(string(readme), "](docs/"+p) {
			t.Errorf("README.md does not link docs/%s", p)
		}
	}
	if n := strings.Count(string(readme), "\n"); n > 250 {
		t.Errorf("README.md has %d lines, more than 250", n)
	}
	// Every page is checked, the ones out of the reading path
	// (results/history) too.
	var all []string
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			all = append(all, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range append([]string{"../README.md"}, all...) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(src), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			if path == "" {
				path = file
			} else {
				path = filepath.Join(filepath.Dir(file), path)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links %s: no such file", file, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[anchor] {
				t.Errorf("%s links %s: %s has no such heading", file, target, path)
			}
		}
	}
}

// TestQuickstartConfig: the README's quick start config loads, and holds
// the embedded default rules unchanged with one rule between them that
// lets a host run uptime once a minute, so the quick start's second task
// is denied with reason min_interval. A rules list replaces the defaults,
// so a file that named only its own rule would drop them.
func TestQuickstartConfig(t *testing.T) {
	src, err := os.ReadFile("quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(src, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("docs/quickstart.yaml: %v", err)
	}
	rules := cfg.Limiter.Rules
	defaults := config.DefaultConfig().Limiter.Rules
	if len(rules) != len(defaults)+1 {
		t.Fatalf("docs/quickstart.yaml has %d rules, want the %d defaults plus once-a-minute", len(rules), len(defaults))
	}
	var own []limiter.Rule
	for _, r := range rules {
		if r.Name == "once-a-minute" {
			own = append(own, r)
			continue
		}
		i := slices.IndexFunc(defaults, func(d limiter.Rule) bool { return d.Name == r.Name })
		if i < 0 || !reflect.DeepEqual(r, defaults[i]) {
			t.Errorf("docs/quickstart.yaml rule %+v is not the default rule of that name", r)
		}
	}
	if len(own) != 1 || own[0].Key != "host+diagnostic" || !slices.Equal(own[0].Match.Diagnostic, []string{"uptime"}) ||
		len(own[0].Limits) != 1 || own[0].Limits[0].MinInterval != time.Minute {
		t.Fatalf("docs/quickstart.yaml once-a-minute = %+v, want min_interval 1m per host+diagnostic for uptime", own)
	}
	if rules[0].Name != "investigation" {
		t.Errorf("docs/quickstart.yaml's first rule is %q: investigation must come first, or a rule before it takes the tool calls", rules[0].Name)
	}
}

// commandProgram is the program of a diagnostic's command in a YAML
// example: `command: [PROGRAM, ...]` or `command: ["PROGRAM", ...]`.
var commandProgram = regexp.MustCompile(`command: \[\s*"?([^",\]\s]+)`)

// TestDocExamplesNameAbsolutePrograms: a diagnostic's program must be an
// absolute path (config validation refuses anything else), so an example
// that names a bare program fails for whoever copies it.
func TestDocExamplesNameAbsolutePrograms(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range append([]string{"../README.md"}, pages...) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if m := commandProgram.FindStringSubmatch(line); m != nil && !strings.HasPrefix(m[1], "/") {
				t.Errorf("%s:%d: example command's program %q is not an absolute path: %s", file, i+1, m[1], strings.TrimSpace(line))
			}
		}
	}
}

// TestHTTPAPIPageStatesTheTaskBodyLimit: POST /v1/tasks refuses a body
// over task.MaxBodySize with a 400, where the alert listener answers
// 413; the page says so, with the limit the code has.
func TestHTTPAPIPageStatesTheTaskBodyLimit(t *testing.T) {
	src, err := os.ReadFile("http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("a body over %d KiB", task.MaxBodySize>>10)
	if !strings.Contains(string(src), want) || !strings.Contains(string(src), task.ReasonTooLarge) {
		t.Fatalf("http-api.md does not state POST /v1/tasks's body limit (%q, reason %s)", want, task.ReasonTooLarge)
	}
}

// TestConfigurationCellsAreShort: a configuration table cell says what
// the key does in a few lines; past about 400 characters the detail
// belongs on the page of its subject, which the cell links.
func TestConfigurationCellsAreShort(t *testing.T) {
	const maxCell = 500
	src, err := os.ReadFile("configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(src), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, c := range regexp.MustCompile(`[^\\]\|`).Split(line, -1) {
			if n := len([]rune(strings.TrimSpace(c))); n > maxCell {
				t.Errorf("configuration.md:%d: a cell of %d characters (more than %d): move its detail to the subject's page and link it", i+1, n, maxCell)
			}
		}
	}
}
