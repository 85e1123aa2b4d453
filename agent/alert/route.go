package alert

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/configerr"
)

// Routes is the routes: section, in order: the first route that matches an
// alert decides what it becomes.
type Routes []Route

// Route says which alerts are eligible for diagnostics and which tasks
// they become.
type Route struct {
	// Name identifies the route in answers, logs and `routes test`.
	Name  string `yaml:"name"`
	Match Match  `yaml:"match"`
	// Host is a template for the task's host; empty = "{{ .Host }}".
	Host string `yaml:"host"`
	// Severity is a template for the task's severity; empty =
	// "{{ .Severity }}".
	Severity string `yaml:"severity"`
	// Tasks are the diagnostics the alert becomes (at least one).
	Tasks []RouteTask `yaml:"tasks"`
	// Resolved makes the route take resolved alerts too; without it a
	// route only sees firing ones.
	Resolved bool `yaml:"resolved"`
	// Investigate "always" asks for a root-cause report of its tasks
	// whatever their outcome (a diagnostic that passes while the alert
	// fires is the case that most needs a look); empty: report.on decides.
	Investigate string `yaml:"investigate"`
}

// InvestigateAlways is Route.Investigate's one value.
const InvestigateAlways = "always"

// Match is what an alert must be for its route to take it. Every part set
// must match; an empty Match takes every alert.
type Match struct {
	// Source lists the sources taken; empty = any.
	Source []string `yaml:"source"`
	// Name is a regular expression searched in the alert name; empty = any.
	Name string `yaml:"name"`
	// Labels maps a label name to a regular expression searched in its
	// value; a missing label has the value "".
	Labels map[string]string `yaml:"labels"`
}

// RouteTask is one task a route makes.
type RouteTask struct {
	Diagnostic string `yaml:"diagnostic"`
	// Params maps a parameter to a template of its value.
	Params map[string]string `yaml:"params"`
}

// MaxTasksPerRoute bounds the tasks one alert can make.
const MaxTasksPerRoute = 16

// routeNameRE keeps route names to what fits a log key and a metric-free
// answer.
var routeNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Validate reports every problem of the section at once, each naming its
// key relative to the section ("[0].match.name"): unparseable regular
// expressions and templates, duplicate names, routes without tasks.
func (rs Routes) Validate() error {
	_, err := compile(rs)
	return err
}

// compiled is a route ready to apply.
type compiled struct {
	name        string
	sources     []string
	nameRE      *regexp.Regexp
	labels      map[string]*regexp.Regexp
	host        *tmpl
	severity    *tmpl
	tasks       []compiledTask
	resolved    bool
	investigate string
}

type compiledTask struct {
	diagnostic string
	params     map[string]*tmpl
}

func compile(rs Routes) ([]compiled, error) {
	var errs []error
	add := func(key, format string, a ...any) { errs = append(errs, configerr.Errorf(key, format, a...)) }
	parse := func(key, text string) *tmpl {
		t, err := parseTemplate(text)
		if err != nil {
			add(key, "invalid template: %w", err)
		}
		return t
	}
	out := make([]compiled, 0, len(rs))
	names := map[string]int{}
	for i, r := range rs {
		p := fmt.Sprintf("[%d]", i)
		c := compiled{name: r.Name, sources: r.Match.Source, resolved: r.Resolved, labels: map[string]*regexp.Regexp{}, investigate: r.Investigate}
		if r.Investigate != "" && r.Investigate != InvestigateAlways {
			add(p+".investigate", "must be %q or left out, got %q", InvestigateAlways, r.Investigate)
		}
		if !routeNameRE.MatchString(r.Name) {
			add(p+".name", "must match %s, got %q", routeNameRE, r.Name)
		} else if j, dup := names[r.Name]; dup {
			add(p+".name", "duplicate of [%d].name %q", j, r.Name)
		} else {
			names[r.Name] = i
		}
		for j, s := range r.Match.Source {
			if !sourceRE.MatchString(s) {
				add(fmt.Sprintf("%s.match.source[%d]", p, j), "must match %s, got %q", sourceRE, s)
			}
		}
		if r.Match.Name != "" {
			re, err := regexp.Compile(r.Match.Name)
			if err != nil {
				add(p+".match.name", "invalid regexp: %w", err)
			}
			c.nameRE = re
		}
		for _, k := range slices.Sorted(maps.Keys(r.Match.Labels)) {
			re, err := regexp.Compile(r.Match.Labels[k])
			if err != nil {
				add(p+".match.labels."+k, "invalid regexp: %w", err)
			}
			c.labels[k] = re
		}
		c.host = parse(p+".host", cmpOr(r.Host, "{{ .Host }}"))
		c.severity = parse(p+".severity", cmpOr(r.Severity, "{{ .Severity }}"))
		switch {
		case len(r.Tasks) == 0:
			add(p+".tasks", "must list at least one task")
		case len(r.Tasks) > MaxTasksPerRoute:
			add(p+".tasks", "at most %d tasks, got %d", MaxTasksPerRoute, len(r.Tasks))
		}
		for j, t := range r.Tasks {
			tp := fmt.Sprintf("%s.tasks[%d]", p, j)
			if t.Diagnostic == "" {
				add(tp+".diagnostic", "must be set")
			}
			ct := compiledTask{diagnostic: t.Diagnostic, params: map[string]*tmpl{}}
			for _, k := range slices.Sorted(maps.Keys(t.Params)) {
				ct.params[k] = parse(tp+".params."+k, t.Params[k])
			}
			c.tasks = append(c.tasks, ct)
		}
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// tmplDefault: {{ .Labels.mountpoint | default "/" }}; a missing label
// is "", so default replaces it.
func tmplDefault(def, v string) string {
	if v == "" {
		return def
	}
	return v
}

// trimPort drops a port: "web-01:9100" → "web-01", "[fd00::1]:9100" →
// "fd00::1"; a value without one is returned as it is.
func trimPort(s string) string {
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// regexCache holds the patterns regexReplace compiled at run time (a
// pattern taken from alert data; a literal one is compiled at parse), one
// per Router; the bound keeps alert data from growing it.
type regexCache struct {
	mu sync.Mutex
	m  map[string]*regexp.Regexp
}

const maxCachedRegexps = 256

// replace: {{ .Labels.instance | regexReplace "\\.internal$" "" }}.
func (c *regexCache) replace(pattern, repl, s string) (string, error) {
	c.mu.Lock()
	re, ok := c.m[pattern]
	c.mu.Unlock()
	if !ok {
		var err error
		if re, err = regexp.Compile(pattern); err != nil {
			return "", err
		}
		c.mu.Lock()
		if len(c.m) < maxCachedRegexps {
			c.m[pattern] = re
		}
		c.mu.Unlock()
	}
	return re.ReplaceAllString(s, repl), nil
}

// Router applies routes to alerts and validates the tasks they make.
type Router struct {
	routes    []compiled
	validator *task.Validator
	newID     func() string
	regexps   *regexCache
	// onResolved sees every resolved alert (WatchResolved); nil = none.
	onResolved func(Received)
}

// NewRouter compiles routes (the same errors as Validate). v checks every
// task a route makes, host first, before the task is accepted; nil skips
// that check (the agent still validates each task it receives).
func NewRouter(rs Routes, v *task.Validator) (*Router, error) {
	c, err := compile(rs)
	if err != nil {
		return nil, err
	}
	return &Router{routes: c, validator: v, newID: randomID, regexps: &regexCache{m: map[string]*regexp.Regexp{}}}, nil
}

// randomID names a task made from an alert; the alert's event id, not
// this, is what dedupe keys on.
func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "alert-" + hex.EncodeToString(b[:])
}

// Decision is what routing made of one alert: tasks (Reason ""), or the
// reason it was ignored or rejected.
type Decision struct {
	// Route is the route that matched, "" for none.
	Route string
	Tasks []task.Task
	// Result is ResultAccepted, ResultIgnored or ResultRejected.
	Result string
	Reason string
	// Detail is for people: which template failed, which field.
	Detail string
}

// Results of an alert, the values of autodiag_alerts_total's result label.
const (
	ResultAccepted = "accepted"
	ResultIgnored  = "ignored"
	ResultRejected = "rejected"
)

// templateData is what route templates see.
type templateData struct {
	Source, Name, Host, Severity, EventID string
	Labels, Annotations, Dimensions       map[string]string
	StartsAt                              time.Time
}

// Route decides one alert: the first route whose match takes it makes its
// tasks; no route is ignored (no_route, or resolved for a resolved alert
// no route takes). A template that fails is rejected (template_error); a
// task that fails validation rejects the alert with the validation
// reason, and none of its tasks are made. now stamps created_at.
func (r *Router) Route(a Received, now time.Time) Decision {
	for i := range r.routes {
		c := &r.routes[i]
		if !c.matches(&a) {
			continue
		}
		return r.apply(c, &a, now)
	}
	if a.Status == StatusResolved {
		return Decision{Result: ResultIgnored, Reason: ReasonResolved}
	}
	return Decision{Result: ResultIgnored, Reason: ReasonNoRoute}
}

func (c *compiled) matches(a *Received) bool {
	if a.Status == StatusResolved && !c.resolved {
		return false
	}
	if len(c.sources) > 0 && !slices.Contains(c.sources, a.Source) {
		return false
	}
	if c.nameRE != nil && !c.nameRE.MatchString(a.Name) {
		return false
	}
	for k, re := range c.labels {
		if !re.MatchString(a.Labels[k]) {
			return false
		}
	}
	return true
}

func (r *Router) apply(c *compiled, a *Received, now time.Time) Decision {
	d := Decision{Route: c.name}
	data := templateData{Source: a.Source, Name: a.Name, Host: a.Host, Severity: a.Severity, EventID: a.EventID,
		Labels: orEmpty(a.Labels), Annotations: orEmpty(a.Annotations), Dimensions: orEmpty(a.Dimensions), StartsAt: a.StartsAt}
	host, err := c.host.execute(r.regexps, &data)
	if err != nil {
		return d.reject(ReasonTemplateError, "host: "+err.Error())
	}
	sev, err := c.severity.execute(r.regexps, &data)
	if err != nil {
		return d.reject(ReasonTemplateError, "severity: "+err.Error())
	}
	for _, ct := range c.tasks {
		t := task.Task{
			ID:         r.newID(),
			Host:       strings.TrimSpace(host),
			Diagnostic: ct.diagnostic,
			Severity:   normSeverity(sev),
			Alert: taskview.Alert{Source: a.Source, Name: a.Name, EventID: a.EventID, Refs: refsOf(a),
				Labels: task.BoundContext(a.Labels), Annotations: task.BoundContext(a.Annotations), StartsAt: a.StartsAt.UTC(),
				Route: c.name, Investigate: c.investigate},
			CreatedAt: now.UTC(),
		}
		if len(ct.params) > 0 {
			t.Params = make(map[string]string, len(ct.params))
		}
		for k, tp := range ct.params {
			v, err := tp.execute(r.regexps, &data)
			if err != nil {
				return d.reject(ReasonTemplateError, "params."+k+": "+err.Error())
			}
			t.Params[k] = v
		}
		if r.validator != nil {
			if err := r.validator.Validate(&t, now); err != nil {
				return d.reject(task.Reason(err), err.Error())
			}
		}
		d.Tasks = append(d.Tasks, t)
	}
	d.Result = ResultAccepted
	return d
}

func (d Decision) reject(reason, detail string) Decision {
	d.Result, d.Reason, d.Detail, d.Tasks = ResultRejected, reason, clip(detail), nil
	return d
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// maxTemplateOutput bounds one template's output: a value past it fails
// validation anyway, and the bound stops a template from growing one.
const maxTemplateOutput = 4096

// Answer is what a payload became: the tasks to send and, per alert, why
// it made none.
type Answer struct {
	Accepted int       `json:"accepted"`
	Ignored  []Outcome `json:"ignored"`
	Rejected []Outcome `json:"rejected"`
	// Tasks are the accepted alerts' tasks, in payload order.
	Tasks []task.Task `json:"-"`
	// Decisions are the routing decisions by payload index, for logs and
	// `routes test`.
	Decisions map[int]Decision `json:"-"`
}

// RoutePayload routes every alert of a decoded payload; the decoder's own
// ignored and rejected items are carried over. One alert's failure never
// affects another's.
// WatchResolved calls f with every resolved alert RoutePayload sees,
// whether a route takes it or not: a resolution is recorded (its
// reports stamped), never a task started by it. f must be bounded.
func (r *Router) WatchResolved(f func(Received)) { r.onResolved = f }

func (r *Router) RoutePayload(p Payload, now time.Time) Answer {
	ans := Answer{
		Ignored:   append([]Outcome{}, p.Ignored...),
		Rejected:  append([]Outcome{}, p.Rejected...),
		Decisions: map[int]Decision{},
	}
	for _, it := range p.Items {
		if it.Alert.Status == StatusResolved && r.onResolved != nil {
			r.onResolved(it.Alert)
		}
		d := r.Route(it.Alert, now)
		ans.Decisions[it.Index] = d
		switch d.Result {
		case ResultAccepted:
			ans.Accepted++
			ans.Tasks = append(ans.Tasks, d.Tasks...)
		case ResultIgnored:
			ans.Ignored = append(ans.Ignored, Outcome{Index: it.Index, Reason: d.Reason, Detail: d.Detail})
		default:
			ans.Rejected = append(ans.Rejected, Outcome{Index: it.Index, Reason: d.Reason, Detail: d.Detail})
		}
	}
	slices.SortStableFunc(ans.Ignored, byIndex)
	slices.SortStableFunc(ans.Rejected, byIndex)
	return ans
}

func byIndex(a, b Outcome) int { return a.Index - b.Index }

// refsOf reads the alert's write-back references from its annotations
// and labels of the names taskview.RefNames lists, an annotation winning
// over a label of the same name.
func refsOf(a *Received) taskview.AlertRefs {
	var r taskview.AlertRefs
	for _, name := range taskview.RefNames {
		v := a.Annotations[name]
		if v == "" {
			v = a.Labels[name]
		}
		r.Set(name, strings.TrimSpace(v))
	}
	return r
}
