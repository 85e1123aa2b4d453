package deploy

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// The DrainSeconds alarm (Maximum of one 1-minute period above
// drain_stuck_minutes × 60) can fire only if an agent still publishes a value
// above the threshold. The agent publishes DrainSeconds at the drain's start
// and every minute after it, until CompleteLifecycleAction succeeds or answers
// no_action. So, with D = lifecycle.drain_timeout, G = the drain's cancel
// grace, C = the agent's completion bound, HB = the hook's heartbeat timeout,
// S = systemd TimeoutStopSec and T = drain_stuck_minutes × 60:
//
//   - a healthy drain that uses its whole budget ends its work by D + G and
//     completes at once: T > D + G, or such drains page;
//   - a drain whose completion keeps failing publishes until D + G + C (the
//     agent gives up), or D + G + HB (the action lapses when heartbeats fail
//     too, and the next attempt answers no_action), or S (systemd kills a
//     SIGTERM-drained agent), or the hook's global timeout, whichever is
//     first: the horizon. The first value above T is published by T + 60s:
//     T + 60s ≤ horizon, or the alarm cannot fire.
//
// The agent-independent alarm on GroupTerminatingInstances covers the rest
// (a dead agent, a drain that ended early and whose completion gave up); it
// runs for terminating_stuck_minutes, which must exceed drain_stuck_minutes so
// it stays the backstop and not the first page.
const drainSecondsPeriod = time.Minute

// drainClocks are the durations that bound how long DrainSeconds is published.
type drainClocks struct {
	drain         time.Duration // lifecycle.drain_timeout
	cancelGrace   time.Duration // drain: wait for cancelled work after the deadline
	completion    time.Duration // agent: CompleteLifecycleAction with its retries
	hookHeartbeat time.Duration // the hook's heartbeat timeout
	stop          time.Duration // systemd TimeoutStopSec
}

// publishHorizon is how long after a drain's start an agent whose completion
// keeps failing still publishes DrainSeconds, at the least.
func (c drainClocks) publishHorizon() time.Duration {
	global := min(48*time.Hour, 100*c.hookHeartbeat)
	return min(c.drain+c.cancelGrace+min(c.completion, c.hookHeartbeat), c.stop, global)
}

// checkDrainStuckReachable reports why a drain-stuck threshold would page
// healthy drains or could never fire.
func checkDrainStuckReachable(drainStuckMinutes, terminatingStuckMinutes int, c drainClocks) error {
	t := time.Duration(drainStuckMinutes) * time.Minute
	var errs []error
	if healthy := c.drain + c.cancelGrace; t <= healthy {
		errs = append(errs, fmt.Errorf("drain_stuck_minutes %d (%s) is not above drain_timeout %s + cancel grace %s: every healthy drain that uses its budget pages", drainStuckMinutes, t, c.drain, c.cancelGrace))
	}
	if h := c.publishHorizon(); t+drainSecondsPeriod > h {
		errs = append(errs, fmt.Errorf("drain_stuck_minutes %d (%s) + one %s period exceeds %s, the longest an agent whose completion fails publishes DrainSeconds (min(drain_timeout %s + grace %s + min(completion %s, hook heartbeat timeout %s), TimeoutStopSec %s, global timeout)): the alarm can never fire",
			drainStuckMinutes, t, drainSecondsPeriod, h, c.drain, c.cancelGrace, c.completion, c.hookHeartbeat, c.stop))
	}
	if terminatingStuckMinutes <= drainStuckMinutes {
		errs = append(errs, fmt.Errorf("terminating_stuck_minutes %d must exceed drain_stuck_minutes %d: a healthy drain near its budget is followed by the EC2 shutdown", terminatingStuckMinutes, drainStuckMinutes))
	}
	return errors.Join(errs...)
}

// goDuration finds, in the non-test Go files of dir, a constant named name
// or an assignment to a field named name (x.Name = …), and evaluates it when
// it is N * time.Unit. The nesting check uses the agent's own constants, so
// a change there fails here instead of silently breaking the alarm.
func goDuration(t *testing.T, dir, name string) time.Duration {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var found []ast.Expr
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if id.Name == name && i < len(n.Values) {
						found = append(found, n.Values[i])
					}
				}
			case *ast.AssignStmt:
				for i, lhs := range n.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == name && i < len(n.Rhs) {
						found = append(found, n.Rhs[i])
					}
				}
			}
			return true
		})
	}
	if len(found) != 1 {
		t.Fatalf("%s: want one constant or default assignment named %s, found %d: update the nesting check (deploy/nesting_test.go) to the agent's new bound", dir, name, len(found))
	}
	d, err := evalDuration(found[0])
	if err != nil {
		t.Fatalf("%s: %s: %v", dir, name, err)
	}
	return d
}

var timeUnits = map[string]time.Duration{
	"Nanosecond": time.Nanosecond, "Microsecond": time.Microsecond, "Millisecond": time.Millisecond,
	"Second": time.Second, "Minute": time.Minute, "Hour": time.Hour,
}

func evalDuration(e ast.Expr) (time.Duration, error) {
	switch e := e.(type) {
	case *ast.ParenExpr:
		return evalDuration(e.X)
	case *ast.BasicLit:
		if e.Kind != token.INT {
			return 0, fmt.Errorf("literal %s is not an integer", e.Value)
		}
		n, err := strconv.ParseInt(e.Value, 0, 64)
		return time.Duration(n), err
	case *ast.SelectorExpr:
		if x, ok := e.X.(*ast.Ident); ok && x.Name == "time" {
			if u, ok := timeUnits[e.Sel.Name]; ok {
				return u, nil
			}
		}
	case *ast.BinaryExpr:
		if e.Op == token.MUL {
			a, err := evalDuration(e.X)
			if err != nil {
				return 0, err
			}
			b, err := evalDuration(e.Y)
			return a * b, err
		}
	}
	return 0, fmt.Errorf("cannot evaluate %T as N * time.Unit", e)
}

// agentClocks reads the agent's bounds from its source.
func agentClocks(t *testing.T) (cancelGrace, completion time.Duration) {
	t.Helper()
	return goDuration(t, filepath.Join("..", "drain"), "CancelGrace"),
		goDuration(t, filepath.Join("..", "agent", "supervisor"), "CompletionTimeout")
}

// moduleCallNumber returns a literal number passed to the module call in
// the example (ok false when it is not passed).
func moduleCallNumber(t *testing.T, name string) (int, bool) {
	t.Helper()
	for _, f := range loadDir(t, exampleDir) {
		for _, b := range f.body.Blocks {
			if b.Type != "module" || len(b.Labels) != 1 || b.Labels[0] != "autodiag" {
				continue
			}
			a, ok := b.Body.Attributes[name]
			if !ok {
				return 0, false
			}
			v, diags := a.Expr.Value(nil)
			if diags.HasErrors() || v.Type() != cty.Number {
				t.Fatalf("%s: module input %s is not a literal number", f.path, name)
			}
			n, _ := v.AsBigFloat().Int64()
			return int(n), true
		}
	}
	t.Fatalf("%s: no module \"autodiag\"", exampleDir)
	return 0, false
}

// TestDrainStuckAlarmCanFire checks the nesting rule above on the module's
// defaults (against the agent's default drain_timeout) and on the example
// (against example.yaml), with the shipped unit's TimeoutStopSec.
func TestDrainStuckAlarmCanFire(t *testing.T) {
	grace, completion := agentClocks(t)
	stop, err := stopTimeout(readUnit(t, unitPath))
	if err != nil {
		t.Fatal(err)
	}
	defaults := moduleDefaults(t)
	number := func(s string) int {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("module default %q: %v", s, err)
		}
		return n
	}

	t.Run("module defaults", func(t *testing.T) {
		stuck := number(defaults["drain_stuck_minutes"])
		c := drainClocks{
			drain: defaultDrainTimeout, cancelGrace: grace, completion: completion,
			hookHeartbeat: time.Duration(number(defaults["heartbeat_timeout"])) * time.Second, stop: stop,
		}
		// terminating_stuck_minutes defaults to drain_stuck_minutes + 5.
		if err := checkDrainStuckReachable(stuck, stuck+5, c); err != nil {
			t.Error(err)
		}
	})

	t.Run("example", func(t *testing.T) {
		stuck, ok := moduleCallNumber(t, "drain_stuck_minutes")
		if !ok {
			stuck = number(defaults["drain_stuck_minutes"])
		}
		terminating, ok := moduleCallNumber(t, "terminating_stuck_minutes")
		if !ok {
			terminating = stuck + 5
		}
		hb, ok := moduleCallNumber(t, "heartbeat_timeout")
		if !ok {
			hb = number(defaults["heartbeat_timeout"])
		}
		drain, err := drainTimeout(configPath)
		if err != nil {
			t.Fatal(err)
		}
		c := drainClocks{drain: drain, cancelGrace: grace, completion: completion, hookHeartbeat: time.Duration(hb) * time.Second, stop: stop}
		if err := checkDrainStuckReachable(stuck, terminating, c); err != nil {
			t.Error(err)
		}
	})
}

// TestRejectsUnreachableDrainStuckAlarm: the rule refuses what it must.
func TestRejectsUnreachableDrainStuckAlarm(t *testing.T) {
	base := drainClocks{drain: 10 * time.Minute, cancelGrace: 30 * time.Second, completion: 2 * time.Minute, hookHeartbeat: 5 * time.Minute, stop: 15 * time.Minute}
	tests := []struct {
		name              string
		stuck, terminates int
		clocks            func(c *drainClocks)
		want              string // empty: accepted
	}{
		{"example values", 11, 16, nil, ""},
		{"threshold at drain_timeout pages healthy drains", 10, 15, nil, "every healthy drain"},
		{"threshold one minute past the horizon", 12, 17, nil, "can never fire"},
		{"short hook heartbeat timeout lapses the action first", 11, 16, func(c *drainClocks) { c.hookHeartbeat = 60 * time.Second }, "can never fire"},
		{"stop timeout kills the agent first", 11, 16, func(c *drainClocks) { c.stop = 11 * time.Minute }, "can never fire"},
		{"longer completion bound widens the window", 14, 19, func(c *drainClocks) { c.completion = 10 * time.Minute }, ""},
		{"terminating alarm not after the drain alarm", 11, 11, nil, "terminating_stuck_minutes 11 must exceed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			if tt.clocks != nil {
				tt.clocks(&c)
			}
			err := checkDrainStuckReachable(tt.stuck, tt.terminates, c)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestEvalDuration(t *testing.T) {
	tests := []struct {
		src  string
		want time.Duration
		ok   bool
	}{
		{"2 * time.Minute", 2 * time.Minute, true},
		{"(30 * time.Second)", 30 * time.Second, true},
		{"time.Hour", time.Hour, true},
		{"x * time.Second", 0, false},
		{"1.5 * time.Second", 0, false},
	}
	for _, tt := range tests {
		e, err := parser.ParseExpr(tt.src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := evalDuration(e)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("evalDuration(%s) = %v, %v; want %v, ok=%v", tt.src, got, err, tt.want, tt.ok)
		}
	}
}

// ---------------------------------------------------------------------------
// The example: group metrics, AMI, user data, secrets.

// exampleResource returns the body of resource TYPE.NAME in the example.
func exampleResource(t *testing.T, typ, name string) (tfFile, *hclsyntax.Body) {
	t.Helper()
	for _, f := range loadDir(t, exampleDir) {
		for _, b := range f.body.Blocks {
			if b.Type == "resource" && len(b.Labels) == 2 && b.Labels[0] == typ && b.Labels[1] == name {
				return f, b.Body
			}
		}
	}
	t.Fatalf("%s: no resource %s.%s", exampleDir, typ, name)
	return tfFile{}, nil
}

func TestExampleGroupPublishesTerminatingInstances(t *testing.T) {
	f, body := exampleResource(t, "aws_autoscaling_group", "fleet")
	a, ok := body.Attributes["enabled_metrics"]
	if !ok {
		t.Fatal("the example's group sets no enabled_metrics: the terminating-stuck alarm would have no data")
	}
	metrics, dyn := stringList(f, a.Expr)
	if len(dyn) > 0 || !strings.Contains(" "+strings.Join(metrics, " ")+" ", " GroupTerminatingInstances ") {
		t.Errorf("enabled_metrics = %v %v, want GroupTerminatingInstances among literals", metrics, dyn)
	}
	if g, ok := body.Attributes["metrics_granularity"]; !ok {
		t.Error("metrics_granularity unset")
	} else if s, _ := staticString(g.Expr); s != "1Minute" {
		t.Errorf("metrics_granularity = %q, want 1Minute (the alarm counts 1-minute periods)", s)
	}
}

func TestExampleAMIShowsInPlans(t *testing.T) {
	for _, f := range loadDir(t, exampleDir) {
		if strings.Contains(string(f.src), "data.aws_ssm_parameter.ami.value") {
			t.Errorf("%s reads the AMI parameter's value, which is sensitive and hides AMI changes in plans; use insecure_value", f.path)
		}
	}
}

const userDataPath = exampleDir + "/templates/user-data.sh.tftpl"

// checkUserData requires every curl to be bounded and retried, and a failed
// install to mark the instance unhealthy.
func checkUserData(src string) []error {
	var errs []error
	joined := strings.ReplaceAll(src, "\\\n", " ")
	n := 0
	for _, line := range strings.Split(joined, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		i := strings.Index(line, "curl ")
		if i < 0 {
			continue
		}
		n++
		fields := strings.Fields(line[i:])
		for _, flag := range []string{"--connect-timeout", "--max-time", "--retry", "--retry-all-errors"} {
			if !containsField(fields, flag) {
				errs = append(errs, fmt.Errorf("curl without %s: %s", flag, strings.TrimSpace(line)))
			}
		}
	}
	if n == 0 {
		errs = append(errs, errors.New("no curl found"))
	}
	// A failed install is ended by the launch hook's ABANDON (the agent
	// never completes it), not by a CLI the AMI may lack.
	if strings.Contains(joined, "aws autoscaling") {
		errs = append(errs, errors.New("a failed install must not need the aws CLI (Debian and Ubuntu AMIs have none): leave it to the launch hook's ABANDON"))
	}
	if !strings.Contains(joined, "trap on_failure EXIT") || !strings.Contains(joined, "set -euo pipefail") || !strings.Contains(joined, "systemctl stop autodiag.service") ||
		!strings.Contains(joined, "lifecycle abandon-launch") {
		errs = append(errs, errors.New("any failure must stop the agent and ABANDON the launch through the agent binary: set -euo pipefail, trap on_failure EXIT, systemctl stop autodiag.service, autodiag lifecycle abandon-launch"))
	}
	return errs
}

func containsField(fields []string, f string) bool {
	for _, x := range fields {
		if x == f {
			return true
		}
	}
	return false
}

func TestUserDataIsBoundedAndFailsLoudly(t *testing.T) {
	src, err := os.ReadFile(userDataPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range checkUserData(string(src)) {
		t.Error(err)
	}
	for _, secret := range []string{"redis://", "rediss://", "redis_url}"} {
		if strings.Contains(string(src), secret) {
			t.Errorf("%s mentions %q: user data must hold no Redis URL", userDataPath, secret)
		}
	}
}

func TestRejectsUnboundedUserData(t *testing.T) {
	const ok = "set -euo pipefail\ntrap on_failure EXIT\nsystemctl stop autodiag.service\nautodiag lifecycle abandon-launch\n"
	tests := []struct {
		name, src string
		want      []string
	}{
		{"bounded", ok + "curl -fsSL --connect-timeout 5 --max-time 60 --retry 5 --retry-all-errors -o x url\n", nil},
		{"continued lines", ok + "curl -fsSL --connect-timeout 5 \\\n  --max-time 60 --retry 5 --retry-all-errors -o x url\n", nil},
		{"old flags", ok + "curl -fsSL --retry 5 --retry-connrefused -o x url\n", []string{"--connect-timeout", "--max-time", "--retry-all-errors"}},
		{"no failure trap", "set -euo pipefail\ncurl --connect-timeout 5 --max-time 60 --retry 5 --retry-all-errors url\n", []string{"trap on_failure"}},
		{"aws CLI", ok + "aws autoscaling set-instance-health --health-status Unhealthy\ncurl --connect-timeout 5 --max-time 60 --retry 5 --retry-all-errors url\n", []string{"aws CLI"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantErrors(t, checkUserData(tt.src), tt.want...)
		})
	}
}

// TestExamplePassesTheSecretNotTheURL: the example hands the module and the
// config the secret's ARN; no variable carries a Redis URL.
func TestExamplePassesTheSecretNotTheURL(t *testing.T) {
	vars, _ := checkVariables(loadDir(t, exampleDir))
	for _, v := range vars {
		if v.name == "redis_url" {
			t.Error("the example still takes redis_url: the URL would land in user data and state")
		}
	}
	for _, name := range []string{"redis_url_secret_arn"} {
		found := false
		for _, f := range loadDir(t, exampleDir) {
			for _, b := range f.body.Blocks {
				if b.Type == "module" && len(b.Labels) == 1 && b.Labels[0] == "autodiag" {
					if a, ok := b.Body.Attributes[name]; ok && f.text(a.Expr.Range()) == "var."+name {
						found = true
					}
				}
			}
		}
		if !found {
			t.Errorf("the example does not pass %s = var.%s to the module", name, name)
		}
	}
	main, err := os.ReadFile(filepath.Join(exampleDir, "main.tf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(main), "url_secret = var.redis_url_secret_arn") {
		t.Error("the example's agent config does not set redis.url_secret")
	}
}

// mdRef matches a repository path of a Markdown document, e.g. docs/design.md.
// A URL's path (preceded by "/") is not one.
var mdRef = regexp.MustCompile(`(?:^|[\s(\x60'"])([A-Za-z0-9_][A-Za-z0-9_./-]*\.md)\b`)

// TestDeployFilesPointAtFilesThatExist: comments in the shipped config and
// unit name documents that exist.
func TestDeployFilesPointAtFilesThatExist(t *testing.T) {
	for _, p := range []string{configPath, unitPath} {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range mdRef.FindAllStringSubmatch(string(src), -1) {
			m := sub[1]
			if _, err := os.Stat(filepath.Join("..", m)); err != nil {
				t.Errorf("%s points at %s: %v", p, m, err)
			}
		}
	}
}
