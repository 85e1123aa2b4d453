package deploy

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/agent/config"
)

// Paths relative to this package directory (go test runs in it).
const (
	terraformDir  = "terraform"
	moduleDir     = "terraform/modules/autodiag"
	exampleDir    = "terraform/examples/fleet"
	unitPath      = "systemd/autodiag.service"
	configPath    = "config/example.yaml"
	moduleReadme  = "terraform/modules/autodiag/README.md"
	tfPluginDirEV = "AUTODIAG_TF_PLUGIN_DIR"
)

// ---------------------------------------------------------------------------
// HCL loading

// tfFile is one parsed .tf file with the bytes its ranges point into.
type tfFile struct {
	path string
	src  []byte
	body *hclsyntax.Body
}

// text returns the source text of an expression, e.g. "aws_sqs_queue.tasks.arn".
func (f tfFile) text(r hcl.Range) string {
	return string(r.SliceBytes(f.src))
}

func parseTF(path string, src []byte) (tfFile, error) {
	file, diags := hclparse.NewParser().ParseHCL(src, path)
	if diags.HasErrors() {
		return tfFile{}, fmt.Errorf("parse %s: %w", path, diags)
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return tfFile{}, fmt.Errorf("parse %s: not native HCL syntax", path)
	}
	return tfFile{path: path, src: src, body: body}, nil
}

// tfPaths lists the .tf and .tftest.hcl files under root, recursively,
// skipping .terraform.
func tfPaths(t *testing.T, root string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".terraform" {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".tf") || strings.HasSuffix(p, ".tftest.hcl")) {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	return paths
}

// loadDir parses the .tf files directly in dir (one Terraform module).
func loadDir(t *testing.T, dir string) []tfFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no .tf files in %s", dir)
	}
	files := make([]tfFile, 0, len(paths))
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parseTF(p, src)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// loadSource parses one in-memory .tf file (table-test cases).
func loadSource(t *testing.T, name, src string) []tfFile {
	t.Helper()
	f, err := parseTF(name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return []tfFile{f}
}

// staticString evaluates expr without any variables; ok is false when the
// expression refers to anything (var., local., resources) or is not a string.
func staticString(expr hcl.Expression) (string, bool) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() || !v.IsWhollyKnown() || v.IsNull() || v.Type() != cty.String {
		return "", false
	}
	return v.AsString(), true
}

// stringList splits a list expression into the elements known statically and
// the source text of the elements that are references or templates.
func stringList(f tfFile, expr hclsyntax.Expression) (static, dynamic []string) {
	if tuple, ok := expr.(*hclsyntax.TupleConsExpr); ok {
		for _, e := range tuple.Exprs {
			if s, ok := staticString(e); ok {
				static = append(static, s)
			} else {
				dynamic = append(dynamic, f.text(e.Range()))
			}
		}
		return static, dynamic
	}
	v, diags := expr.Value(nil)
	if !diags.HasErrors() && v.IsWhollyKnown() && !v.IsNull() && (v.Type().IsTupleType() || v.Type().IsListType()) {
		for it := v.ElementIterator(); it.Next(); {
			_, ev := it.Element()
			if ev.Type() == cty.String {
				static = append(static, ev.AsString())
				continue
			}
			dynamic = append(dynamic, ev.GoString())
		}
		return static, dynamic
	}
	return nil, []string{f.text(expr.Range())}
}

// ---------------------------------------------------------------------------
// Check: variables are documented and typed

type variable struct {
	name     string
	required bool // no default
}

// checkVariables returns the module's variables and one error per variable
// without a non-empty static description or without a type.
func checkVariables(files []tfFile) ([]variable, []error) {
	var vars []variable
	var errs []error
	for _, f := range files {
		for _, b := range f.body.Blocks {
			if b.Type != "variable" || len(b.Labels) != 1 {
				continue
			}
			name := b.Labels[0]
			where := fmt.Sprintf("%s: variable %q", f.path, name)
			if a, ok := b.Body.Attributes["description"]; !ok {
				errs = append(errs, fmt.Errorf("%s has no description", where))
			} else if s, ok := staticString(a.Expr); !ok || strings.TrimSpace(s) == "" {
				errs = append(errs, fmt.Errorf("%s has an empty or non-literal description", where))
			}
			if _, ok := b.Body.Attributes["type"]; !ok {
				errs = append(errs, fmt.Errorf("%s has no type", where))
			}
			_, hasDefault := b.Body.Attributes["default"]
			vars = append(vars, variable{name: name, required: !hasDefault})
		}
	}
	return vars, errs
}

// ---------------------------------------------------------------------------
// Check: the example passes exactly the module's inputs

// moduleMetaArgs are module block arguments that are not inputs.
var moduleMetaArgs = map[string]bool{
	"source": true, "version": true, "providers": true,
	"depends_on": true, "count": true, "for_each": true,
}

// checkModuleCalls finds the module blocks in callers whose source resolves
// (relative to callerDir) to moduleDir and reports inputs the module does not
// declare and required inputs that are not passed. calls counts the matching
// module blocks so a test can insist that there is one.
func checkModuleCalls(callers []tfFile, callerDir, moduleDir string, vars []variable) (calls int, errs []error) {
	declared := make(map[string]bool, len(vars))
	for _, v := range vars {
		declared[v.name] = true
	}
	wantDir := filepath.Clean(moduleDir)
	for _, f := range callers {
		for _, b := range f.body.Blocks {
			if b.Type != "module" || len(b.Labels) != 1 {
				continue
			}
			src, ok := b.Body.Attributes["source"]
			if !ok {
				continue
			}
			s, ok := staticString(src.Expr)
			if !ok || filepath.Clean(filepath.Join(callerDir, s)) != wantDir {
				continue
			}
			calls++
			where := fmt.Sprintf("%s: module %q", f.path, b.Labels[0])
			passed := map[string]bool{}
			for name := range b.Body.Attributes {
				if moduleMetaArgs[name] {
					continue
				}
				passed[name] = true
				if !declared[name] {
					errs = append(errs, fmt.Errorf("%s passes %q, which %s does not declare", where, name, moduleDir))
				}
			}
			for _, v := range vars {
				if v.required && !passed[v.name] {
					errs = append(errs, fmt.Errorf("%s does not pass required input %q", where, v.name))
				}
			}
		}
	}
	sortErrors(errs)
	return calls, errs
}

// ---------------------------------------------------------------------------
// Check: IAM policy documents are least-privilege

// statement is one statement of an aws_iam_policy_document data source.
type statement struct {
	where        string // file: data "aws_iam_policy_document" "name" statement "sid"
	doc          string // data source name
	effect       string
	actions      []string // literal actions
	dynActions   []string // actions that are not literals (not auditable)
	resources    []string // literal resources
	dynResources []string // resource references, e.g. aws_sqs_queue.tasks.arn
	conditionOn  []string // condition variables, e.g. cloudwatch:namespace
	notAction    bool
	notResource  bool
}

// policyStatements extracts every statement (static or dynamic "statement"
// blocks) of every aws_iam_policy_document data source.
func policyStatements(files []tfFile) []statement {
	var out []statement
	for _, f := range files {
		for _, b := range f.body.Blocks {
			if b.Type != "data" || len(b.Labels) != 2 || b.Labels[0] != "aws_iam_policy_document" {
				continue
			}
			doc := b.Labels[1]
			for _, sb := range b.Body.Blocks {
				body := sb.Body
				switch {
				case sb.Type == "statement":
				case sb.Type == "dynamic" && len(sb.Labels) == 1 && sb.Labels[0] == "statement":
					body = nil
					for _, c := range sb.Body.Blocks {
						if c.Type == "content" {
							body = c.Body
						}
					}
					if body == nil {
						continue
					}
				default:
					continue
				}
				out = append(out, parseStatement(f, doc, body))
			}
		}
	}
	return out
}

func parseStatement(f tfFile, doc string, body *hclsyntax.Body) statement {
	st := statement{doc: doc, effect: "Allow"}
	sid := ""
	if a, ok := body.Attributes["sid"]; ok {
		sid, _ = staticString(a.Expr)
	}
	st.where = fmt.Sprintf("%s: data.aws_iam_policy_document.%s statement %q", f.path, doc, sid)
	if a, ok := body.Attributes["effect"]; ok {
		if s, ok := staticString(a.Expr); ok {
			st.effect = s
		} else {
			st.effect = "(dynamic)"
		}
	}
	if a, ok := body.Attributes["actions"]; ok {
		st.actions, st.dynActions = stringList(f, a.Expr)
	}
	if a, ok := body.Attributes["resources"]; ok {
		st.resources, st.dynResources = stringList(f, a.Expr)
	}
	_, st.notAction = body.Attributes["not_actions"]
	_, st.notResource = body.Attributes["not_resources"]
	for _, c := range body.Blocks {
		if c.Type != "condition" {
			continue
		}
		if a, ok := c.Body.Attributes["variable"]; ok {
			if s, ok := staticString(a.Expr); ok {
				st.conditionOn = append(st.conditionOn, s)
			}
		}
	}
	return st
}

// readOnlyPrefixes name the action families that only read. These, and only
// these, may be granted on a "*" resource (many Describe/List calls support no
// resource-level permissions at all).
var readOnlyPrefixes = []string{"Describe", "List", "Get"}

func isReadOnly(action string) bool {
	_, name, ok := strings.Cut(action, ":")
	if !ok {
		return false
	}
	for _, p := range readOnlyPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// isWildcardResource reports whether a resource matches every resource of a
// service: "*" itself, or an ARN whose resource part is "*"
// (arn:aws:sqs:us-east-1:123456789012:*). An ARN with "*" in one segment,
// like the ASG id in ...:autoScalingGroup:*:autoScalingGroupName/NAME, still
// names one resource and is not a wildcard.
func isWildcardResource(r string) bool {
	if r == "*" {
		return true
	}
	parts := strings.SplitN(r, ":", 6)
	return len(parts) == 6 && parts[0] == "arn" && strings.Trim(parts[5], "*/") == ""
}

// wildcardResourceExceptions are mutating actions allowed on "*" when the
// statement narrows them with the given condition key instead.
// PutMetricData has no resource ARN; cloudwatch:namespace is the only limit.
var wildcardResourceExceptions = map[string]string{
	"cloudwatch:PutMetricData": "cloudwatch:namespace",
}

// checkPolicies applies the least-privilege rules to every Allow statement:
//
//  1. no "*" action and no service-wide "service:*" action;
//  2. a partial wildcard action ("ec2:Describe*") only for read-only families;
//  3. actions are literals, so the grant can be read from the source;
//  4. no NotAction / NotResource (they grant by exclusion);
//  5. a wildcard resource only for read-only actions (Describe*, List*, Get*)
//     and for the exceptions above when their condition key is present;
//     every other (mutating) action must name its resources.
func checkPolicies(sts []statement) []error {
	var errs []error
	for _, st := range sts {
		if st.effect != "Allow" {
			continue
		}
		if st.notAction || st.notResource {
			errs = append(errs, fmt.Errorf("%s: not_actions/not_resources grant by exclusion; list actions and resources", st.where))
		}
		for _, a := range st.dynActions {
			errs = append(errs, fmt.Errorf("%s: action %s is not a literal; actions must be auditable from the source", st.where, a))
		}
		for _, a := range st.actions {
			_, name, _ := strings.Cut(a, ":")
			switch {
			case a == "*":
				errs = append(errs, fmt.Errorf("%s: action \"*\" grants every action of every service", st.where))
			case name == "*":
				errs = append(errs, fmt.Errorf("%s: action %q grants every action of the service", st.where, a))
			case strings.Contains(a, "*") && !isReadOnly(a):
				errs = append(errs, fmt.Errorf("%s: wildcard action %q is not limited to a read-only family (%s)", st.where, a, strings.Join(readOnlyPrefixes, "*, ")+"*"))
			}
		}
		wild := ""
		for _, r := range st.resources {
			if isWildcardResource(r) {
				wild = r
			}
		}
		if wild == "" {
			continue
		}
		for _, a := range st.actions {
			if isReadOnly(a) {
				continue
			}
			if key, ok := wildcardResourceExceptions[a]; ok && slices.Contains(st.conditionOn, key) {
				continue
			}
			errs = append(errs, fmt.Errorf("%s: mutating action %q on wildcard resource %q", st.where, a, wild))
		}
	}
	return errs
}

// policyDocRef matches data.aws_iam_policy_document.NAME.json (with an
// optional [0] index), the only acceptable value of a policy argument.
var policyDocRef = regexp.MustCompile(`^data\.aws_iam_policy_document\.[A-Za-z0-9_-]+(\[[0-9]+\])?\.json$`)

// checkPolicySources makes sure no policy escapes checkPolicies: every
// policy / assume_role_policy argument of an aws_iam_* resource and every
// source/override document list refers to an aws_iam_policy_document.
func checkPolicySources(files []tfFile) []error {
	var errs []error
	check := func(f tfFile, where string, body *hclsyntax.Body) {
		for _, name := range []string{"policy", "assume_role_policy"} {
			a, ok := body.Attributes[name]
			if !ok {
				continue
			}
			if ref := f.text(a.Expr.Range()); !policyDocRef.MatchString(ref) {
				errs = append(errs, fmt.Errorf("%s: %s = %s is not an aws_iam_policy_document", where, name, ref))
			}
		}
	}
	for _, f := range files {
		for _, b := range f.body.Blocks {
			switch {
			case b.Type == "resource" && len(b.Labels) == 2 && strings.HasPrefix(b.Labels[0], "aws_iam_"):
				where := fmt.Sprintf("%s: %s.%s", f.path, b.Labels[0], b.Labels[1])
				check(f, where, b.Body)
				for _, inner := range b.Body.Blocks {
					if inner.Type == "inline_policy" {
						check(f, where+" inline_policy", inner.Body)
					}
				}
				if _, ok := b.Body.Attributes["managed_policy_arns"]; ok {
					errs = append(errs, fmt.Errorf("%s: managed_policy_arns grants policies this test cannot see", where))
				}
				if b.Labels[0] == "aws_iam_role_policy_attachment" || b.Labels[0] == "aws_iam_policy_attachment" {
					errs = append(errs, fmt.Errorf("%s: attached managed policies cannot be checked; use an aws_iam_policy_document", where))
				}
			case b.Type == "data" && len(b.Labels) == 2 && b.Labels[0] == "aws_iam_policy_document":
				for _, name := range []string{"source_policy_documents", "override_policy_documents", "source_json", "override_json"} {
					a, ok := b.Body.Attributes[name]
					if !ok {
						continue
					}
					ref := f.text(a.Expr.Range())
					if !strings.HasPrefix(ref, "data.aws_iam_policy_document.") && !strings.HasPrefix(ref, "[data.aws_iam_policy_document.") {
						errs = append(errs, fmt.Errorf("%s: data.aws_iam_policy_document.%s %s = %s is not an aws_iam_policy_document", f.path, b.Labels[1], name, ref))
					}
				}
			}
		}
	}
	return errs
}

// ---------------------------------------------------------------------------
// Check: systemd stop timeout outlasts the drain

// systemdUnit maps section -> key -> values (a key may repeat).
type systemdUnit map[string]map[string][]string

// last returns the effective (last) value of a key, as systemd applies it.
func (u systemdUnit) last(section, key string) (string, bool) {
	vs := u[section][key]
	if len(vs) == 0 {
		return "", false
	}
	return vs[len(vs)-1], true
}

func parseUnit(src []byte) (systemdUnit, error) {
	u := systemdUnit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			key, value, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				return nil, fmt.Errorf("line %d: %q is neither a section nor key=value", n, line)
			}
			key = strings.TrimSpace(key)
			u[section][key] = append(u[section][key], strings.TrimSpace(value))
		}
	}
	return u, sc.Err()
}

// systemdUnits maps systemd time span units (systemd.time(7)) to durations.
var systemdUnits = map[string]time.Duration{
	"us": time.Microsecond, "usec": time.Microsecond,
	"ms": time.Millisecond, "msec": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
}

var timespanPart = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)`)

// errInfinite marks TimeoutStopSec=infinity (or 0, which means the same).
var errInfinite = errors.New("infinite")

// parseTimespan parses a systemd time span such as "15min", "900", "1h 30s".
// A bare number is seconds.
func parseTimespan(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "infinity" {
		return 0, errInfinite
	}
	if s == "" {
		return 0, errors.New("empty time span")
	}
	var total time.Duration
	for rest := s; rest != ""; rest = strings.TrimSpace(rest) {
		m := timespanPart.FindStringSubmatch(rest)
		if m == nil {
			return 0, fmt.Errorf("time span %q: cannot parse %q", s, rest)
		}
		unit := time.Second
		if m[2] != "" {
			u, ok := systemdUnits[m[2]]
			if !ok {
				return 0, fmt.Errorf("time span %q: unknown unit %q", s, m[2])
			}
			unit = u
		}
		n, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return 0, fmt.Errorf("time span %q: %w", s, err)
		}
		total += time.Duration(n * float64(unit))
		rest = rest[len(m[0]):]
	}
	if total == 0 {
		return 0, errInfinite
	}
	return total, nil
}

// stopTimeout is the unit's effective TimeoutStopSec (TimeoutSec sets it too;
// systemd's default is 90s).
func stopTimeout(u systemdUnit) (time.Duration, error) {
	v, ok := u.last("Service", "TimeoutStopSec")
	if !ok {
		v, ok = u.last("Service", "TimeoutSec")
	}
	if !ok {
		return 90 * time.Second, nil
	}
	return parseTimespan(v)
}

// checkStopTimeout requires TimeoutStopSec to be finite and longer than the
// drain: systemd must not SIGKILL the agent before it completes the lifecycle
// action, and a wedged agent must still be killed eventually.
func checkStopTimeout(u systemdUnit, drain time.Duration) error {
	stop, err := stopTimeout(u)
	if errors.Is(err, errInfinite) {
		return fmt.Errorf("TimeoutStopSec is infinite; it must be finite and exceed lifecycle.drain_timeout %s", drain)
	}
	if err != nil {
		return fmt.Errorf("TimeoutStopSec: %w", err)
	}
	if stop <= drain {
		return fmt.Errorf("TimeoutStopSec %s does not exceed lifecycle.drain_timeout %s: systemd would SIGKILL the agent before it completes the lifecycle action", stop, drain)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Example config

// Defaults of the lifecycle timeouts (README "Configuration").
const (
	defaultDrainTimeout      = 10 * time.Minute
	defaultHeartbeatInterval = 30 * time.Second
)

// loadExampleConfig loads example.yaml as the agent does (config.Load:
// strict keys, defaults, validation), so a typo or a value the agent
// refuses fails this package's tests.
func loadExampleConfig(t *testing.T) config.Config {
	t.Helper()
	src, err := os.ReadFile(configPath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(src, nil)
	if err != nil {
		t.Fatalf("%s: %v", configPath, err)
	}
	return c
}

// drainTimeout reads lifecycle.drain_timeout from a config file; only that key
// is decoded, so it works on any valid config.
func drainTimeout(path string) (time.Duration, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var c struct {
		Lifecycle struct {
			DrainTimeout string `yaml:"drain_timeout"`
		} `yaml:"lifecycle"`
	}
	if err := yaml.Unmarshal(src, &c); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	if c.Lifecycle.DrainTimeout == "" {
		return defaultDrainTimeout, nil
	}
	d, err := time.ParseDuration(c.Lifecycle.DrainTimeout)
	if err != nil {
		return 0, fmt.Errorf("%s: lifecycle.drain_timeout: %w", path, err)
	}
	return d, nil
}

func readUnit(t *testing.T, path string) systemdUnit {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(src)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return u
}

// ---------------------------------------------------------------------------
// Helpers

func sortErrors(errs []error) {
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
}

// wantErrors asserts that errs has one error containing each fragment, in any
// order, and no other error.
func wantErrors(t *testing.T, errs []error, fragments ...string) {
	t.Helper()
	if len(errs) != len(fragments) {
		t.Fatalf("got %d errors, want %d (%q):\n%v", len(errs), len(fragments), fragments, errors.Join(errs...))
	}
	for _, frag := range fragments {
		found := false
		for _, err := range errs {
			if strings.Contains(err.Error(), frag) {
				found = true
			}
		}
		if !found {
			t.Errorf("no error contains %q; got:\n%v", frag, errors.Join(errs...))
		}
	}
}

// ---------------------------------------------------------------------------
// Tests on the real artifacts

func TestTerraformSyntax(t *testing.T) {
	paths := tfPaths(t, terraformDir)
	if len(paths) < 8 {
		t.Fatalf("found only %d .tf files under %s: %v", len(paths), terraformDir, paths)
	}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parseTF(p, src); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestVariablesHaveDescriptionAndType(t *testing.T) {
	for _, dir := range []string{moduleDir, exampleDir} {
		t.Run(dir, func(t *testing.T) {
			vars, errs := checkVariables(loadDir(t, dir))
			if len(vars) == 0 {
				t.Fatalf("no variables found in %s", dir)
			}
			for _, err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestExampleCallsModuleWithItsInputs(t *testing.T) {
	vars, errs := checkVariables(loadDir(t, moduleDir))
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	calls, errs := checkModuleCalls(loadDir(t, exampleDir), exampleDir, moduleDir, vars)
	if calls != 1 {
		t.Fatalf("%s calls %s %d times, want 1", exampleDir, moduleDir, calls)
	}
	for _, err := range errs {
		t.Error(err)
	}
}

func TestPoliciesAreLeastPrivilege(t *testing.T) {
	for _, dir := range []string{moduleDir, exampleDir} {
		t.Run(dir, func(t *testing.T) {
			files := loadDir(t, dir)
			for _, err := range checkPolicies(policyStatements(files)) {
				t.Error(err)
			}
			for _, err := range checkPolicySources(files) {
				t.Error(err)
			}
		})
	}
}

// grants lists "action on resource[ if condition keys]" for every Allow
// statement of the named policy documents, sorted.
func grants(t *testing.T, sts []statement, docs ...string) []string {
	t.Helper()
	var got []string
	for _, st := range sts {
		if !slices.Contains(docs, st.doc) {
			continue
		}
		if st.effect != "Allow" {
			t.Errorf("%s: unexpected effect %q", st.where, st.effect)
		}
		cond := ""
		if len(st.conditionOn) > 0 {
			cond = " if " + strings.Join(st.conditionOn, ",")
		}
		for _, a := range st.actions {
			for _, r := range append(slices.Clone(st.resources), st.dynResources...) {
				got = append(got, a+" on "+r+cond)
			}
		}
	}
	slices.Sort(got)
	return got
}

// TestAgentPolicyGrantsExactlyTheAgentCalls pins the instance role's grants:
// every call the agent makes, on the resource it makes it on, and nothing else.
// A new AWS call in the agent needs a line here and in the module. The calls,
// by grep over agent/, lifecycle/ and cmd/:
//
//   - task queue: ReceiveMessage, DeleteMessageBatch, ChangeMessageVisibility
//     (extend, release, defer), SendMessage (POST /v1/tasks, deferrals re-sent),
//     GetQueueAttributes (the redrive policy's maxReceiveCount, the launch
//     readiness check);
//   - DLQ: SendMessage (rejections), GetQueueAttributes (MaximumMessageSize);
//   - lifecycle queue: ReceiveMessage, ChangeMessageVisibility (others'
//     notifications back at once, ours kept while draining), DeleteMessage;
//   - Auto Scaling: RecordLifecycleActionHeartbeat, CompleteLifecycleAction
//     (the terminating action and, with launch_hook_name, the launching one,
//     both on the group's ARN), DescribeAutoScalingInstances (group unknown),
//     DescribeLifecycleHooks (hook_heartbeat_timeout unset);
//   - CloudWatch: PutMetricData (DrainSeconds, LimiterDegraded);
//   - redis.url_secret: GetSecretValue or GetParameter, and Decrypt through
//     that service when the secret has a customer managed key;
//   - SSE-KMS queues: GenerateDataKey (send) and Decrypt (receive) through SQS;
//   - the other *_secret credentials: GetSecretValue or GetParameter on
//     exactly credential_secret_arns, Decrypt through those services;
//   - report.provider bedrock: InvokeModel (Converse) on the model (and an
//     inference profile's foundation models), and
//     ApplyGuardrail on report.guardrail;
//   - results.s3: PutObject under the bucket's prefix, and GenerateDataKey
//     through S3 with sse aws:kms.
func TestAgentPolicyGrantsExactlyTheAgentCalls(t *testing.T) {
	const (
		tasks     = "aws_sqs_queue.tasks.arn"
		dlq       = "aws_sqs_queue.dlq.arn"
		lifecycle = "aws_sqs_queue.lifecycle[0].arn"
		asg       = "local.asg_arn"
		secret    = "var.redis_url_secret_arn"
		secretKey = "var.redis_url_secret_kms_key_arn"
		queueKey  = "var.queue_kms_key_arn"
		viaKMS    = " if kms:ViaService"
	)
	want := []string{
		"sqs:ReceiveMessage on " + tasks,
		"sqs:DeleteMessage on " + tasks,
		"sqs:ChangeMessageVisibility on " + tasks,
		"sqs:GetQueueAttributes on " + tasks,
		"sqs:SendMessage on " + tasks,
		"sqs:SendMessage on " + dlq,
		"sqs:GetQueueAttributes on " + dlq,
		"sqs:ReceiveMessage on " + lifecycle,
		"sqs:DeleteMessage on " + lifecycle,
		"sqs:ChangeMessageVisibility on " + lifecycle,
		"autoscaling:RecordLifecycleActionHeartbeat on " + asg,
		"autoscaling:CompleteLifecycleAction on " + asg,
		"autoscaling:DescribeAutoScalingInstances on *",
		"autoscaling:DescribeLifecycleHooks on *",
		"cloudwatch:PutMetricData on * if cloudwatch:namespace",
		"secretsmanager:GetSecretValue on " + secret,
		"ssm:GetParameter on " + secret,
		"kms:Decrypt on " + secretKey + viaKMS,
		"kms:GenerateDataKey on " + queueKey + viaKMS,
		"kms:Decrypt on " + queueKey + viaKMS,
		"bedrock:InvokeModel on concat([var.report_model_arn], var.report_foundation_model_arns)",
		"secretsmanager:GetSecretValue on local.credential_sm",
		"ssm:GetParameter on local.credential_ssm",
		"kms:Decrypt on var.credential_secret_kms_key_arns" + viaKMS,
		"bedrock:ApplyGuardrail on var.report_guardrail_arn",
		"s3:PutObject on local.results_objects_arn",
		"kms:GenerateDataKey on var.results_kms_key_arn" + viaKMS,
	}
	slices.Sort(want)
	got := grants(t, policyStatements(loadDir(t, moduleDir)), "agent", "agent_lifecycle_queue")
	if !slices.Equal(got, want) {
		t.Errorf("agent grants differ\n got: %q\nwant: %q", got, want)
	}
}

// TestHookPolicyGrantsExactlyThePublish pins the role Auto Scaling assumes to
// publish lifecycle notifications (AWS documents SendMessage and GetQueueUrl).
func TestHookPolicyGrantsExactlyThePublish(t *testing.T) {
	const lifecycle = "aws_sqs_queue.lifecycle[0].arn"
	want := []string{
		"sqs:SendMessage on " + lifecycle,
		"sqs:GetQueueUrl on " + lifecycle,
		"kms:GenerateDataKey on var.queue_kms_key_arn if kms:ViaService",
		"kms:Decrypt on var.queue_kms_key_arn if kms:ViaService",
	}
	slices.Sort(want)
	got := grants(t, policyStatements(loadDir(t, moduleDir)), "hook_publish")
	if !slices.Equal(got, want) {
		t.Errorf("hook grants differ\n got: %q\nwant: %q", got, want)
	}
}

// TestAlarmTopicGrantIsScopedToTheTopic pins the task queue's one Allow
// statement: SendMessage for the SNS service, only from the module's alarm
// topic (aws:SourceArn), only on the task queue. Any topic in any account
// could otherwise put tasks on the fleet's queue.
func TestAlarmTopicGrantIsScopedToTheTopic(t *testing.T) {
	var found int
	for _, f := range loadDir(t, moduleDir) {
		for _, b := range f.body.Blocks {
			if b.Type != "data" || len(b.Labels) != 2 || b.Labels[0] != "aws_iam_policy_document" || b.Labels[1] != "queue_tls_only" {
				continue
			}
			for _, sb := range b.Body.Blocks {
				if sb.Type != "dynamic" {
					continue
				}
				found++
				if got := f.text(sb.Body.Attributes["for_each"].Expr.Range()); got != `each.key == "tasks" ? aws_sns_topic.alarms : []` {
					t.Errorf("the alarm topic statement applies to %s, want the task queue with the topic only", got)
				}
				var content *hclsyntax.Body
				for _, c := range sb.Body.Blocks {
					if c.Type == "content" {
						content = c.Body
					}
				}
				st := parseStatement(f, b.Labels[1], content)
				if !slices.Equal(st.actions, []string{"sqs:SendMessage"}) || !slices.Equal(st.dynResources, []string{"each.value.arn"}) {
					t.Errorf("%s: grants %v on %v, want sqs:SendMessage on the task queue", st.where, st.actions, st.dynResources)
				}
				if !slices.Contains(st.conditionOn, "aws:SourceArn") {
					t.Errorf("%s: no aws:SourceArn condition: any topic could send", st.where)
				}
				var principal string
				for _, c := range content.Blocks {
					if c.Type == "principals" {
						principal = f.text(c.Body.Attributes["type"].Expr.Range()) + " " + f.text(c.Body.Attributes["identifiers"].Expr.Range())
					}
				}
				if principal != `"Service" ["sns.amazonaws.com"]` {
					t.Errorf("%s: principal %s, want the SNS service", st.where, principal)
				}
			}
		}
	}
	if found != 1 {
		t.Fatalf("found %d alarm topic statements in queue_tls_only, want 1", found)
	}
}

func TestModuleReadmeListsInputsAndOutputs(t *testing.T) {
	readme, err := os.ReadFile(moduleReadme)
	if err != nil {
		t.Fatal(err)
	}
	files := loadDir(t, moduleDir)
	vars, _ := checkVariables(files)
	var names []string
	for _, v := range vars {
		names = append(names, v.name)
	}
	for _, f := range files {
		for _, b := range f.body.Blocks {
			if b.Type == "output" && len(b.Labels) == 1 {
				names = append(names, b.Labels[0])
			}
		}
	}
	for _, n := range names {
		if !bytes.Contains(readme, []byte("| `"+n+"` |")) {
			t.Errorf("%s has no table row for %q", moduleReadme, n)
		}
	}
}

func TestUnitStopTimeoutExceedsDrainTimeout(t *testing.T) {
	drain, err := drainTimeout(configPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkStopTimeout(readUnit(t, unitPath), drain); err != nil {
		t.Errorf("%s vs %s: %v", unitPath, configPath, err)
	}
}

func TestUnitSettings(t *testing.T) {
	u := readUnit(t, unitPath)
	tests := []struct {
		key, want string
	}{
		{"ExecStart", "/usr/local/bin/autodiag run --config /etc/autodiag/config.yaml"},
		{"EnvironmentFile", "-/etc/autodiag/autodiag.env"},
		{"KillSignal", "SIGTERM"},
		{"KillMode", "mixed"},
		{"Type", "notify"},
		{"NotifyAccess", "main"},
		{"Restart", "always"},
		{"User", "autodiag"},
		{"NoNewPrivileges", "yes"},
		{"ProtectSystem", "strict"},
		{"PrivateTmp", "yes"},
		{"CapabilityBoundingSet", ""},
		{"AmbientCapabilities", ""},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			got, ok := u.last("Service", tt.key)
			if !ok {
				t.Fatalf("[Service] has no %s", tt.key)
			}
			if got != tt.want {
				t.Errorf("%s = %q, want %q", tt.key, got, tt.want)
			}
		})
	}
	t.Run("ProtectHome", func(t *testing.T) {
		if got, _ := u.last("Service", "ProtectHome"); got != "yes" && got != "read-only" && got != "tmpfs" {
			t.Errorf("ProtectHome = %q, want yes, read-only or tmpfs", got)
		}
	})
	// Diagnostics read the whole filesystem (df, ps); nothing may be hidden
	// from them beyond /home and /tmp, and writes only where listed.
	t.Run("ReadWritePaths", func(t *testing.T) {
		for _, p := range u["Service"]["ReadWritePaths"] {
			for _, f := range strings.Fields(p) {
				if f == "/" || f == "/etc" || f == "/usr" {
					t.Errorf("ReadWritePaths=%s undoes ProtectSystem=strict", f)
				}
			}
		}
	})
}

// Exit statuses of `autodiag run` and what the unit must do with each.
var exitContract = []struct {
	status  int
	restart bool
	why     string
}{
	{0, false, "done: a drain that ended a lifecycle action, a spot termination, or a SIGTERM stop"},
	{1, true, "a fast exit or a failure"},
	{2, false, "bad configuration or usage: restarting cannot help"},
	{75, true, "drained for another reason (POST /v1/drain, rebalance without replacement, resumed drain): the instance stays"},
}

// restartsOnExit reports whether systemd restarts the service after its main
// process exits with status (not a signal, not a stop job), following
// systemd.service(5): RestartPreventExitStatus and RestartForceExitStatus
// win over Restart=; on-success and on-failure split on SuccessExitStatus.
func restartsOnExit(u systemdUnit, status int) (bool, error) {
	listed := func(key string) (bool, error) {
		for _, v := range u["Service"][key] {
			for _, f := range strings.Fields(v) {
				n, err := strconv.Atoi(f)
				if err != nil {
					// Signal names apply to signals, not to exit statuses.
					if strings.HasPrefix(f, "SIG") {
						continue
					}
					return false, fmt.Errorf("%s=%s: %w", key, v, err)
				}
				if n == status {
					return true, nil
				}
			}
			if v == "" {
				// An empty assignment resets the list.
				return false, nil
			}
		}
		return false, nil
	}
	if prevent, err := listed("RestartPreventExitStatus"); err != nil || prevent {
		return false, err
	}
	if force, err := listed("RestartForceExitStatus"); err != nil || force {
		return force, err
	}
	success, err := listed("SuccessExitStatus")
	if err != nil {
		return false, err
	}
	clean := status == 0 || success
	restart, _ := u.last("Service", "Restart")
	switch restart {
	case "always":
		return true, nil
	case "on-success":
		return clean, nil
	case "on-failure":
		return !clean, nil
	case "", "no", "on-abnormal", "on-abort", "on-watchdog":
		return false, nil
	}
	return false, fmt.Errorf("unknown Restart=%s", restart)
}

func checkExitContract(u systemdUnit) []error {
	var errs []error
	for _, c := range exitContract {
		got, err := restartsOnExit(u, c.status)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if got != c.restart {
			errs = append(errs, fmt.Errorf("exit %d (%s): restart = %v, want %v", c.status, c.why, got, c.restart))
		}
	}
	return errs
}

// TestUnitRestartSemantics: the unit restarts exactly the exit statuses the
// agent's contract says it must, and no start limit can stop it for good.
func TestUnitRestartSemantics(t *testing.T) {
	u := readUnit(t, unitPath)
	for _, err := range checkExitContract(u) {
		t.Error(err)
	}
	if v, _ := u.last("Unit", "StartLimitIntervalSec"); v != "0" {
		t.Errorf("StartLimitIntervalSec=%q, want 0: after a burst of transient failures systemd would stop restarting, leaving no agent", v)
	}
	if v, _ := u.last("Service", "RestartSec"); v == "" {
		t.Error("RestartSec unset: systemd's 100ms would hammer a dependency that is down")
	} else if d, err := parseTimespan(v); err != nil || d < 5*time.Second || d > time.Minute {
		t.Errorf("RestartSec=%s (%v), want between 5s and 1min", v, err)
	}
	// Type=notify: a start that never reports READY must end, and within the
	// example's user data run (which waits for it).
	if v, ok := u.last("Service", "TimeoutStartSec"); !ok {
		t.Error("TimeoutStartSec unset")
	} else if d, err := parseTimespan(v); err != nil || d > 5*time.Minute {
		t.Errorf("TimeoutStartSec=%s (%v), want finite and at most 5min", v, err)
	}
}

// TestRejectsUnitsThatBreakTheExitContract: the check fails on the old unit
// and on near misses.
func TestRejectsUnitsThatBreakTheExitContract(t *testing.T) {
	tests := []struct {
		name, unit string
		want       []string
	}{
		{"contract", "[Service]\nRestart=always\nRestartPreventExitStatus=0 2\nSuccessExitStatus=75\n", nil},
		{"contract without SuccessExitStatus", "[Service]\nRestart=always\nRestartPreventExitStatus=0 2\n", nil},
		{"on-failure (75 would be success, then not restarted)", "[Service]\nRestart=on-failure\nSuccessExitStatus=75\n", []string{"exit 2", "exit 75"}},
		{"on-failure without success list restarts bad config", "[Service]\nRestart=on-failure\n", []string{"exit 2"}},
		{"always restarts a finished drain", "[Service]\nRestart=always\nRestartPreventExitStatus=2\n", []string{"exit 0"}},
		{"no restart", "[Service]\n", []string{"exit 1", "exit 75"}},
		{"signal names ignored", "[Service]\nRestart=always\nRestartPreventExitStatus=0 2 SIGKILL\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := parseUnit([]byte(tt.unit))
			if err != nil {
				t.Fatal(err)
			}
			wantErrors(t, checkExitContract(u), tt.want...)
		})
	}
}

// systemdVerify runs `systemd-analyze verify` on unit text, with ExecStart's
// binary swapped for an executable that exists here. systemd-analyze exits 0
// on unknown keys and unparsable values but prints them, so any output is a
// finding.
func systemdVerify(t *testing.T, unit string) string {
	t.Helper()
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not on PATH")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit = strings.ReplaceAll(unit, "ExecStart=/usr/local/bin/autodiag ", "ExecStart="+exe+" ")
	path := filepath.Join(t.TempDir(), "autodiag.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), bin, "verify", path).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestUnitVerify(t *testing.T) {
	src, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(src)
	t.Run(unitPath, func(t *testing.T) {
		if out := systemdVerify(t, unit); out != "" {
			t.Errorf("systemd-analyze verify %s:\n%s", unitPath, out)
		}
	})
	// The check notices a misspelt hardening key (systemd would ignore it).
	t.Run("misspelt key is reported", func(t *testing.T) {
		broken := strings.Replace(unit, "ProtectSystem=strict", "ProtectSytem=strict", 1)
		if out := systemdVerify(t, broken); !strings.Contains(out, "ProtectSytem") {
			t.Errorf("systemd-analyze verify said %q, want a complaint about ProtectSytem", out)
		}
	})
}

// TestExampleConfig loads example.yaml as the agent does
// and checks that its timeouts nest and that it agrees with the module.
func TestExampleConfig(t *testing.T) {
	c := loadExampleConfig(t)
	interval := cmp.Or(c.Lifecycle.HeartbeatInterval, defaultHeartbeatInterval)
	drain := cmp.Or(c.Drain.Timeout, defaultDrainTimeout)
	hookHB := c.Lifecycle.HookHeartbeatTimeout

	t.Run("timeouts nest", func(t *testing.T) {
		if hookHB == 0 {
			t.Fatal("lifecycle.hook_heartbeat_timeout is not set")
		}
		if hookHB <= 2*interval {
			t.Errorf("hook_heartbeat_timeout %s must exceed 2 x heartbeat_interval %s", hookHB, interval)
		}
		global := min(48*time.Hour, 100*hookHB)
		if drain >= global {
			t.Errorf("drain_timeout %s must be below the hook's global timeout %s", drain, global)
		}
	})

	t.Run("matches module defaults", func(t *testing.T) {
		defaults := moduleDefaults(t)
		if got := defaults["heartbeat_timeout"]; got != strconv.Itoa(int(hookHB.Seconds())) {
			t.Errorf("module heartbeat_timeout default %s, config hook_heartbeat_timeout %s", got, hookHB)
		}
		if got := defaults["metrics_namespace"]; got != c.CloudWatch.Namespace {
			t.Errorf("module metrics_namespace default %q, config cloudwatch.namespace %q", got, c.CloudWatch.Namespace)
		}
		if !c.CloudWatch.Enabled {
			t.Error("cloudwatch.enabled is false: the drain-stuck alarm would never see DrainSeconds")
		}
	})

	t.Run("diagnostics are read-only commands with absolute paths", func(t *testing.T) {
		if n := len(c.Diagnostics); n < 3 {
			t.Fatalf("%d diagnostics, want at least 3", n)
		}
		for _, d := range c.Diagnostics {
			if len(d.Command) == 0 || !filepath.IsAbs(d.Command[0]) {
				t.Errorf("diagnostic %q: command %q must start with an absolute path", d.Name, d.Command)
			}
			for _, arg := range d.Command {
				if strings.Contains(arg, "{param.") {
					name := strings.TrimSuffix(strings.TrimPrefix(arg[strings.Index(arg, "{param."):], "{param."), "}")
					if _, ok := d.Params[name]; !ok {
						t.Errorf("diagnostic %q uses {param.%s} without a pattern in params", d.Name, name)
					}
				}
			}
		}
	})
}

// moduleDefaults returns the literal default of each module variable.
func moduleDefaults(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, f := range loadDir(t, moduleDir) {
		for _, b := range f.body.Blocks {
			if b.Type != "variable" || len(b.Labels) != 1 {
				continue
			}
			a, ok := b.Body.Attributes["default"]
			if !ok {
				continue
			}
			v, diags := a.Expr.Value(nil)
			if diags.HasErrors() || v.IsNull() {
				continue
			}
			switch v.Type() {
			case cty.String:
				out[b.Labels[0]] = v.AsString()
			case cty.Number:
				out[b.Labels[0]] = v.AsBigFloat().Text('f', -1)
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// The checks reject what they must: broken fixtures and table cases.

func TestRejectsBrokenHCL(t *testing.T) {
	if _, err := parseTF("broken.tf", []byte("variable \"x\" {\n  type = string\n")); err == nil {
		t.Error("an unterminated block parsed without error")
	}
}

func TestRejectsVariablesWithoutDescriptionOrType(t *testing.T) {
	_, errs := checkVariables(loadDir(t, "testdata/bad_variables"))
	wantErrors(t, errs,
		`variable "no_description" has no description`,
		`variable "empty_description" has an empty or non-literal description`,
		`variable "no_type" has no type`,
	)
}

func TestRejectsBadModuleCall(t *testing.T) {
	const (
		mod    = "testdata/bad_module_call/module"
		caller = "testdata/bad_module_call/example"
	)
	vars, errs := checkVariables(loadDir(t, mod))
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	calls, errs := checkModuleCalls(loadDir(t, caller), caller, mod, vars)
	if calls != 1 {
		t.Fatalf("found %d calls, want 1", calls)
	}
	wantErrors(t, errs,
		`passes "not_an_input"`,
		`does not pass required input "asg_name"`,
	)
}

func TestRejectsWildcardPolicies(t *testing.T) {
	// The fixture file: a wildcard resource on a mutating action, among others.
	t.Run("testdata/bad_policy", func(t *testing.T) {
		errs := checkPolicies(policyStatements(loadDir(t, "testdata/bad_policy")))
		wantErrors(t, errs,
			// ReceiveMessage changes visibility and receive counts: mutating.
			`mutating action "sqs:ReceiveMessage" on wildcard resource "*"`,
			`mutating action "sqs:DeleteMessage" on wildcard resource "*"`,
			`mutating action "autoscaling:CompleteLifecycleAction" on wildcard resource "*"`,
		)
	})

	stmt := func(body string) string {
		return "data \"aws_iam_policy_document\" \"p\" {\n  statement {\n" + body + "\n  }\n}\n"
	}
	tests := []struct {
		name string
		src  string
		want []string // error fragments; none means accepted
	}{
		{"star action", stmt(`actions = ["*"]
resources = [aws_sqs_queue.q.arn]`), []string{`action "*" grants every action`}},
		{"service-wide action", stmt(`actions = ["sqs:*"]
resources = [aws_sqs_queue.q.arn]`), []string{`action "sqs:*" grants every action of the service`}},
		{"mutating wildcard family", stmt(`actions = ["sqs:Delete*"]
resources = [aws_sqs_queue.q.arn]`), []string{`wildcard action "sqs:Delete*"`}},
		{"read-only wildcard family on star", stmt(`actions = ["autoscaling:Describe*"]
resources = ["*"]`), nil},
		{"mutating action on star", stmt(`actions = ["sqs:SendMessage"]
resources = ["*"]`), []string{`mutating action "sqs:SendMessage" on wildcard resource "*"`}},
		{"mutating action on service-wide ARN", stmt(`actions = ["sqs:SendMessage"]
resources = ["arn:aws:sqs:us-east-1:123456789012:*"]`), []string{`mutating action "sqs:SendMessage" on wildcard resource`}},
		{"mutating action beside a star resource", stmt(`actions = ["sqs:SendMessage"]
resources = [aws_sqs_queue.q.arn, "*"]`), []string{`mutating action "sqs:SendMessage"`}},
		{"mutating action on a named ARN with a star segment", stmt(`actions = ["autoscaling:CompleteLifecycleAction"]
resources = ["arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/fleet"]`), nil},
		{"mutating action on a reference", stmt(`actions = ["sqs:SendMessage"]
resources = [aws_sqs_queue.q.arn]`), nil},
		{"PutMetricData without namespace condition", stmt(`actions = ["cloudwatch:PutMetricData"]
resources = ["*"]`), []string{`mutating action "cloudwatch:PutMetricData" on wildcard resource`}},
		{"PutMetricData with namespace condition", stmt(`actions = ["cloudwatch:PutMetricData"]
resources = ["*"]
condition {
  test     = "StringEquals"
  variable = "cloudwatch:namespace"
  values   = [var.ns]
}`), nil},
		{"not_actions", stmt(`not_actions = ["iam:*"]
resources = ["*"]`), []string{"not_actions/not_resources"}},
		{"dynamic action list", stmt(`actions = var.actions
resources = [aws_sqs_queue.q.arn]`), []string{"action var.actions is not a literal"}},
		{"deny may use wildcards", stmt(`effect = "Deny"
actions = ["*"]
resources = ["*"]`), nil},
		{"dynamic statement block", `data "aws_iam_policy_document" "p" {
  dynamic "statement" {
    for_each = var.queues
    content {
      actions   = ["sqs:DeleteMessage"]
      resources = ["*"]
    }
  }
}`, []string{`mutating action "sqs:DeleteMessage" on wildcard resource "*"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := checkPolicies(policyStatements(loadSource(t, "case.tf", tt.src)))
			wantErrors(t, errs, tt.want...)
		})
	}
}

func TestRejectsPoliciesTheCheckCannotSee(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"policy document reference", `resource "aws_iam_role_policy" "p" {
  role   = aws_iam_role.r.id
  policy = data.aws_iam_policy_document.p.json
}`, nil},
		{"counted policy document reference", `resource "aws_iam_role" "r" {
  assume_role_policy = data.aws_iam_policy_document.a[0].json
}`, nil},
		{"inline jsonencode", `resource "aws_iam_role_policy" "p" {
  role   = aws_iam_role.r.id
  policy = jsonencode({ Statement = [{ Effect = "Allow", Action = "*", Resource = "*" }] })
}`, []string{"policy = jsonencode"}},
		{"inline_policy block", `resource "aws_iam_role" "r" {
  assume_role_policy = data.aws_iam_policy_document.a.json
  inline_policy {
    name   = "x"
    policy = file("policy.json")
  }
}`, []string{"inline_policy: policy = file"}},
		{"managed policy attachment", `resource "aws_iam_role_policy_attachment" "a" {
  role       = aws_iam_role.r.name
  policy_arn = "arn:aws:iam::aws:policy/AdministratorAccess"
}`, []string{"attached managed policies"}},
		{"raw source json", `data "aws_iam_policy_document" "p" {
  source_policy_documents = [file("extra.json")]
}`, []string{"source_policy_documents"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErrors(t, checkPolicySources(loadSource(t, "case.tf", tt.src)), tt.want...)
		})
	}
}

func TestRejectsShortStopTimeout(t *testing.T) {
	drain, err := drainTimeout(configPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("testdata/short_timeout.service", func(t *testing.T) {
		err := checkStopTimeout(readUnit(t, "testdata/short_timeout.service"), drain)
		if err == nil || !strings.Contains(err.Error(), "does not exceed lifecycle.drain_timeout") {
			t.Errorf("checkStopTimeout = %v, want a rejection", err)
		}
	})

	tests := []struct {
		unit    string
		drain   time.Duration
		wantErr string // empty: accepted
	}{
		{"[Service]\nTimeoutStopSec=15min\n", 10 * time.Minute, ""},
		{"[Service]\nTimeoutStopSec=10min\n", 10 * time.Minute, "does not exceed"},
		{"[Service]\nTimeoutStopSec=600\n", 10 * time.Minute, "does not exceed"},
		{"[Service]\nTimeoutStopSec=10min 1s\n", 10 * time.Minute, ""},
		{"[Service]\nTimeoutSec=1h\n", 10 * time.Minute, ""},
		{"[Service]\nTimeoutStopSec=1h\nTimeoutStopSec=5min\n", 10 * time.Minute, "does not exceed"},
		{"[Service]\n", 10 * time.Minute, "does not exceed"}, // systemd default 90s
		{"[Service]\nTimeoutStopSec=infinity\n", 10 * time.Minute, "infinite"},
		{"[Service]\nTimeoutStopSec=0\n", 10 * time.Minute, "infinite"},
		{"[Service]\nTimeoutStopSec=15 fortnights\n", 10 * time.Minute, "unknown unit"},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(strings.TrimSpace(tt.unit), "\n", " "), func(t *testing.T) {
			u, err := parseUnit([]byte(tt.unit))
			if err != nil {
				t.Fatal(err)
			}
			err = checkStopTimeout(u, tt.drain)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseTimespan(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"90", 90 * time.Second},
		{"15min", 15 * time.Minute},
		{"1h 30s", time.Hour + 30*time.Second},
		{"2min30s", 2*time.Minute + 30*time.Second},
		{"500ms", 500 * time.Millisecond},
		{"1.5h", 90 * time.Minute},
		{"1d", 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTimespan(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("parseTimespan(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseUnitRejectsGarbage(t *testing.T) {
	if _, err := parseUnit([]byte("[Service]\nthis is not a setting\n")); err == nil {
		t.Error("a line without = parsed")
	}
	if _, err := parseUnit([]byte("KillSignal=SIGTERM\n")); err == nil {
		t.Error("a setting outside any section parsed")
	}
}

// ---------------------------------------------------------------------------
// Terraform / OpenTofu binary checks (skipped without a binary)

func terraformBinary(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"terraform", "tofu"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("neither terraform nor tofu on PATH")
	return ""
}

func runTerraform(t *testing.T, bin, dir string, args ...string) {
	t.Helper()
	runTerraformEnv(t, nil, bin, dir, args...)
}

// runTerraformEnv is runTerraform with env added to the environment.
func runTerraformEnv(t *testing.T, env []string, bin, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", filepath.Base(bin), strings.Join(args, " "), dir, err, out)
	}
}

func TestTerraformFmt(t *testing.T) {
	bin := terraformBinary(t)
	runTerraform(t, bin, ".", "fmt", "-check", "-recursive", "-diff", "-no-color", terraformDir)
}

// TestTerraformValidateAndTest runs init, validate and `terraform test`
// offline against a provider mirror (terraform init -plugin-dir), since
// provider downloads are not possible everywhere. validate catches dependency
// cycles between the example and the module; the tests/*.tftest.hcl files
// apply both against a mocked AWS provider and assert on the wiring and the
// rendered agent config. Set AUTODIAG_TF_PLUGIN_DIR to enable it
// (terraform >= 1.7 for mock providers). validate and test use the mirror's
// providers started once for the whole test (startMirrorProviders: ~70 CPU
// seconds less than a start per operation); init installs them from the
// mirror as before.
func TestTerraformValidateAndTest(t *testing.T) {
	bin := terraformBinary(t)
	pluginDir := os.Getenv(tfPluginDirEV)
	if pluginDir == "" {
		t.Skip(tfPluginDirEV + " not set (a provider mirror for terraform init -plugin-dir)")
	}
	// Copy the deploy tree: init writes .terraform and a lock file.
	root := t.TempDir()
	for _, dir := range []string{terraformDir, "config", "systemd"} {
		if err := os.CopyFS(filepath.Join(root, dir), os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
	}
	var reattach []string
	if v := startMirrorProviders(t, pluginDir); v != "" {
		reattach = []string{"TF_REATTACH_PROVIDERS=" + v}
	}
	for _, dir := range []string{moduleDir, exampleDir} {
		t.Run(dir, func(t *testing.T) {
			wd := filepath.Join(root, dir)
			runTerraform(t, bin, wd, "init", "-backend=false", "-input=false", "-no-color", "-plugin-dir="+pluginDir)
			runTerraformEnv(t, reattach, bin, wd, "validate", "-no-color")
			runTerraformEnv(t, reattach, bin, wd, "test", "-no-color")
		})
	}
}
