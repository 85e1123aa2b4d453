package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/internal/agenttest"
)

// The operators' pictures: a Grafana dashboard and Prometheus rules whose
// queries name the agent's metrics.
const (
	dashboardPath = "grafana/autodiag.json"
	rulesPath     = "prometheus/autodiag-rules.yml"
)

// Values the dashboard's template variables are replaced with before its
// queries are parsed; the sentinels let the test see that every selector
// is filtered by $job and $instance.
const (
	jobSentinel      = "__job__"
	instanceSentinel = "__instance__"
)

// dashboard is the part of Grafana's dashboard JSON the tests read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	return d
}

// allPanels flattens rows: a collapsed row holds its panels itself.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// rulesFile is the part of a Prometheus rules file the tests read;
// `promtool check rules` (scripts/test.sh) validates the rest.
type rulesFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) rulesFile {
	t.Helper()
	b, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	var f rulesFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", rulesPath, err)
	}
	if len(f.Groups) == 0 {
		t.Fatalf("%s: no rule groups", rulesPath)
	}
	return f
}

// query is one PromQL expression and where it comes from.
type query struct {
	where string // "dashboard panel 3 \"Tasks/s\" target A", "rule AutodiagRedisDown"
	expr  string
}

var grafanaVar = regexp.MustCompile(`\$\{?(\w+)(?::\w+)?\}?`)

// expandGrafana replaces the dashboard's template variables with values
// PromQL accepts: intervals with 5m, $job and $instance with sentinels.
func expandGrafana(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		name := grafanaVar.FindStringSubmatch(v)[1]
		switch name {
		case "__rate_interval", "__interval", "__range":
			return "5m"
		case "job":
			return jobSentinel
		case "instance":
			return instanceSentinel
		}
		return "x"
	})
}

func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	var qs []query
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			qs = append(qs, query{
				where: fmt.Sprintf("%s panel %d %q target %s", dashboardPath, p.ID, p.Title, tg.RefID),
				expr:  expandGrafana(tg.Expr),
			})
		}
	}
	for _, v := range d.Templating.List {
		q, ok := v.Query.(map[string]any)
		if !ok {
			continue
		}
		text, _ := q["query"].(string)
		if m := labelValues.FindStringSubmatch(text); m != nil {
			qs = append(qs, query{where: fmt.Sprintf("%s variable %s", dashboardPath, v.Name), expr: expandGrafana(m[1])})
		}
	}
	return qs
}

// labelValues is a Grafana variable query: label_values(selector, label).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)

func ruleQueries(f rulesFile) (qs []query, recorded map[string]bool) {
	recorded = map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if r.Record != "" {
				name = r.Record
				recorded[r.Record] = true
			}
			qs = append(qs, query{where: fmt.Sprintf("%s group %s rule %s", rulesPath, g.Name, name), expr: r.Expr})
		}
	}
	return qs, recorded
}

// selectors parses expr and returns its vector selectors.
func selectors(expr string) ([]*parser.VectorSelector, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var vs []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if s, ok := n.(*parser.VectorSelector); ok {
			vs = append(vs, s)
		}
		return nil
	})
	return vs, nil
}

// metricName is a selector's metric name, from `name{…}` or
// `{__name__="name"}`.
func metricName(s *parser.VectorSelector) string {
	if s.Name != "" {
		return s.Name
	}
	for _, m := range s.LabelMatchers {
		if m.Name == "__name__" {
			return m.Value
		}
	}
	return ""
}

// TestPicturesReferenceRegisteredMetrics fails when the dashboard or the
// rules name a metric the agent does not register, so a renamed metric
// cannot leave an empty panel or an alert that never fires.
func TestPicturesReferenceRegisteredMetrics(t *testing.T) {
	a := agenttest.OpenFull(t)
	registered := agenttest.RegisteredNames(t, a.Registry())
	// The registry described is the one GET /metrics serves: its
	// unlabelled families are there before any task.
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil))
	for _, name := range []string{"autodiag_tasks_received_total", "autodiag_drain_state", "autodiag_redis_up"} {
		if !registered[name] || !strings.Contains(rec.Body.String(), "\n"+name+" ") {
			t.Fatalf("%s: described %v, served by /metrics: %q", name, registered[name], rec.Body.String())
		}
	}
	// A sanity check on the descriptor parsing and on the features the
	// config switches on: an empty set would make every reference look
	// missing for the wrong reason.
	for _, must := range []string{"autodiag_tasks_received_total", "autodiag_lifecycle_completions_total", "autodiag_limiter_decisions_total",
		"autodiag_notifications_total", "autodiag_reports_total", "autodiag_redactions_total", "autodiag_alerts_total"} {
		if !registered[must] {
			t.Fatalf("agent registry lacks %s; described: %v", must, slices.Sorted(maps.Keys(registered)))
		}
	}

	rules, recorded := ruleQueries(loadRules(t))
	queries := append(dashboardQueries(t, loadDashboard(t)), rules...)
	known := func(name string) (ok bool, note string) {
		if name == "up" {
			return true, "" // Prometheus's own per-target series (availability rules)
		}
		if strings.Contains(name, ":") {
			return recorded[name], "recorded by no rule in " + rulesPath
		}
		cands := []string{name}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, found := strings.CutSuffix(name, suffix); found {
				cands = append(cands, base) // a histogram's series
			}
		}
		for _, c := range cands {
			if registered[c] {
				return true, ""
			}
		}
		return false, "not registered by the agent"
	}

	referenced := map[string]bool{}
	for _, q := range queries {
		sels, err := selectors(q.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.where, err, q.expr)
			continue
		}
		for _, s := range sels {
			name := metricName(s)
			if name == "" {
				t.Errorf("%s: selector %s names no metric", q.where, s)
				continue
			}
			if ok, note := known(name); !ok {
				t.Errorf("%s: %s is %s", q.where, name, note)
			}
			referenced[name] = true
		}
	}
	if len(referenced) < 10 {
		t.Errorf("only %d metrics referenced; the pictures were not read", len(referenced))
	}
}

// TestDashboardShape checks what Grafana needs to import the dashboard
// and what makes it usable for a fleet: a datasource variable, job and
// instance filters on every query, panels that do not overlap.
func TestDashboardShape(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q: both are required", d.UID, d.Title)
	}
	if d.SchemaVersion < 39 {
		t.Errorf("schemaVersion %d, want 39 or later", d.SchemaVersion)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Name == "datasource" && v.Query != "prometheus" {
			t.Errorf("datasource variable queries %v, want prometheus", v.Query)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "job": "query", "instance": "query"} {
		if vars[name] != typ {
			t.Errorf("template variable %s: type %q, want %q", name, vars[name], typ)
		}
	}

	ids := map[int]bool{}
	var placed []panel
	panels := allPanels(d.Panels)
	for _, p := range panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.ID == 0 || ids[p.ID] {
			t.Errorf("%s: id must be unique and non-zero", where)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("%s: gridPos %+v outside the 24-column grid", where, g)
		}
		for _, q := range placed {
			h := q.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("%s overlaps panel %d %q", where, q.ID, q.Title)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s: datasource must be ${datasource}", where)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no targets", where)
		}
		for _, tg := range p.Targets {
			if tg.RefID == "" || strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s: target %q needs refId and expr", where, tg.RefID)
			}
			sels, err := selectors(expandGrafana(tg.Expr))
			if err != nil {
				continue // reported by TestPicturesReferenceRegisteredMetrics
			}
			for _, s := range sels {
				if !filtered(s, "job", jobSentinel) || !filtered(s, "instance", instanceSentinel) {
					t.Errorf("%s target %s: %s is not filtered by job=~\"$job\" and instance=~\"$instance\"", where, tg.RefID, s)
				}
			}
		}
	}
	if len(panels) < 10 {
		t.Errorf("%d panels; the dashboard was not read", len(panels))
	}
}

func filtered(s *parser.VectorSelector, label, value string) bool {
	for _, m := range s.LabelMatchers {
		if m.Name == label && m.Value == value {
			return true
		}
	}
	return false
}

// drainStuckMargin reads AutodiagDrainStuck's expression: it must compare
// time() with the agent's exported deadline, `time() -
// autodiag_drain_deadline_timestamp_seconds > N`, for agents still
// draining, and not with a fixed drain duration that holds for one
// drain_timeout only. It returns N.
func drainStuckMargin(expr string) (time.Duration, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return 0, err
	}
	margin := time.Duration(-1)
	names := map[string]bool{}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			names[metricName(n)] = true
		case *parser.BinaryExpr:
			lhs, ok := n.LHS.(*parser.BinaryExpr)
			num, isNum := n.RHS.(*parser.NumberLiteral)
			if n.Op != parser.GTR || !ok || !isNum || lhs.Op != parser.SUB {
				return nil
			}
			call, isCall := lhs.LHS.(*parser.Call)
			sel, isSel := lhs.RHS.(*parser.VectorSelector)
			if isCall && call.Func.Name == "time" && isSel && metricName(sel) == "autodiag_drain_deadline_timestamp_seconds" {
				margin = time.Duration(num.Val * float64(time.Second))
			}
		}
		return nil
	})
	switch {
	case names["autodiag_drain_duration_seconds"]:
		return 0, errors.New("compares autodiag_drain_duration_seconds with a fixed threshold, right for one drain_timeout only")
	case margin < 0:
		return 0, errors.New("has no `time() - autodiag_drain_deadline_timestamp_seconds > N`")
	case !names["autodiag_drain_state"]:
		return 0, errors.New("does not require autodiag_drain_state (still draining): a drained agent keeps its deadline")
	}
	return margin, nil
}

// TestDrainStuckRuleFollowsTheDeadline: AutodiagDrainStuck fires past each
// agent's own deadline, with a margin longer than the drain's cancel grace
// (read from the drain package), so a healthy drain that used its whole
// budget and cancelled its work does not page.
func TestDrainStuckRuleFollowsTheDeadline(t *testing.T) {
	grace := goDuration(t, filepath.Join("..", "drain"), "CancelGrace")
	var found bool
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "AutodiagDrainStuck" {
				continue
			}
			found = true
			margin, err := drainStuckMargin(r.Expr)
			if err != nil {
				t.Fatalf("AutodiagDrainStuck %v:\n%s", err, r.Expr)
			}
			if margin <= grace {
				t.Errorf("AutodiagDrainStuck fires %s past the deadline, not past the cancel grace %s: every drain that uses its budget pages", margin, grace)
			}
		}
	}
	if !found {
		t.Fatal("no alert AutodiagDrainStuck")
	}
}

func TestRejectsDrainStuckRulesWithoutTheDeadline(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"autodiag_drain_duration_seconds > 660 and on (job, instance) autodiag_drain_state == 1", "fixed threshold"},
		{"time() - autodiag_drain_deadline_timestamp_seconds > 60", "still draining"},
		{"autodiag_drain_deadline_timestamp_seconds < time() and on (job, instance) autodiag_drain_state == 1", "no `time()"},
	} {
		if _, err := drainStuckMargin(tc.expr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.expr, err, tc.want)
		}
	}
}

// notCharted are the agent's metrics the dashboard leaves out on purpose,
// with the reason; every other autodiag_* family the agent registers has a
// panel.
var notCharted = map[string]string{}

// TestDashboardChartsEveryAgentMetric fails when the agent registers an
// autodiag_* family no dashboard panel queries, so a metric added for
// operators does not stay invisible to them.
func TestDashboardChartsEveryAgentMetric(t *testing.T) {
	registered := agenttest.RegisteredNames(t, agenttest.OpenFull(t).Registry())
	charted := map[string]bool{}
	for _, q := range dashboardQueries(t, loadDashboard(t)) {
		sels, err := selectors(q.expr)
		if err != nil {
			continue // reported by TestPicturesReferenceRegisteredMetrics
		}
		for _, s := range sels {
			name := metricName(s)
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, found := strings.CutSuffix(name, suffix); found && registered[base] {
					name = base
				}
			}
			charted[name] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(registered)) {
		if !strings.HasPrefix(name, "autodiag_") || charted[name] {
			continue
		}
		if why, ok := notCharted[name]; ok {
			t.Logf("%s not charted: %s", name, why)
			continue
		}
		t.Errorf("%s is registered by the agent but no panel of %s queries it", name, dashboardPath)
	}
	for name := range notCharted {
		if charted[name] {
			t.Errorf("%s is charted; remove it from notCharted", name)
		}
	}
}
