package packaging

import (
	"bufio"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/lifecycle"
)

var update = flag.Bool("update", false, "rewrite config.yaml from deploy/config/example.yaml")

const (
	examplePath  = "../deploy/config/example.yaml"
	packagedPath = "config.yaml"
	unitPath     = "../deploy/systemd/autodiag.service"
	dropInPath   = "systemd/packaged.conf"
)

// packagedHeader replaces the example's leading comment block.
const packagedHeader = `# autodiag configuration, installed by the autodiag package as a config file:
# upgrades keep your edits (dpkg asks, rpm writes config.yaml.rpmnew).
#
# As shipped it needs no AWS and no Redis: tasks come in through
# POST /v1/tasks on admin_addr, the limiter and task state are in memory, and
# only SIGTERM drains. For a fleet, uncomment the AWS-specific lines (queue,
# redis, the lifecycle sources and names, cloudwatch) and put in your values;
# every key is in docs/configuration.md. Then:
#
#   autodiag config validate --config /etc/autodiag/config.yaml \
#       --systemd-unit /lib/systemd/system/autodiag.service
#   systemctl enable --now autodiag
#
# Generated from deploy/config/example.yaml: go test ./packaging -update
`

// awsBlocks are the top-level keys that name AWS or Redis endpoints: the
// whole block is commented out.
var awsBlocks = []string{"queue", "redis", "cloudwatch"}

// awsLifecycleKeys are the lifecycle keys that only the AWS sources (imds,
// sqs) read; sources itself is replaced by the signal-only list.
var awsLifecycleKeys = []string{"sources", "queue_url", "hook_name", "asg_name", "imds_poll_interval"}

// packagedConfig derives the packaged config from the example: the
// example's header is replaced, AWS-specific lines are commented out in
// place (so uncommenting them restores the example), and lifecycle sources
// becomes [signal].
func packagedConfig(example string) string {
	var out strings.Builder
	out.WriteString(packagedHeader)
	sc := bufio.NewScanner(strings.NewReader(example))
	header := true
	block := ""
	for sc.Scan() {
		line := sc.Text()
		if header {
			if strings.HasPrefix(line, "#") {
				continue
			}
			header = false
		}
		if line != "" && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "#") {
			block, _, _ = strings.Cut(line, ":")
		}
		key := strings.TrimSpace(line)
		key, _, _ = strings.Cut(key, ":")
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			out.WriteString(line)
		case slices.Contains(awsBlocks, block):
			out.WriteString("# " + line)
		case block == "lifecycle" && key == "sources":
			indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
			out.WriteString("# " + line + "\n")
			out.WriteString(indent + "sources: [signal]               # SIGTERM only; add imds and sqs on EC2")
		case block == "lifecycle" && slices.Contains(awsLifecycleKeys, key):
			out.WriteString("# " + line)
		default:
			out.WriteString(line)
		}
		out.WriteString("\n")
	}
	return out.String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPackagedConfigInSync: the shipped copy is what the example derives
// to, so an edit of the example reaches the packages.
func TestPackagedConfigInSync(t *testing.T) {
	want := packagedConfig(readFile(t, examplePath))
	if *update {
		if err := os.WriteFile(packagedPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := readFile(t, packagedPath); got != want {
		t.Fatalf("%s is out of date with %s: run go test ./packaging -update", packagedPath, examplePath)
	}
}

// TestPackagedConfigRunsWithoutAWS: a fresh install validates and would
// start on a host with no AWS credentials and no Redis.
func TestPackagedConfigRunsWithoutAWS(t *testing.T) {
	cfg, err := config.Load([]byte(readFile(t, packagedPath)), nil)
	if err != nil {
		t.Fatalf("packaged config does not validate: %v", err)
	}
	if !cfg.Embedded() {
		t.Errorf("packaged config names a queue or Redis: queue.url=%q redis.url=%q", cfg.Queue.URL, cfg.Redis.URL)
	}
	if !slices.Equal(cfg.Lifecycle.Sources, []string{lifecycle.SourceSignal}) {
		t.Errorf("lifecycle.sources = %v, want [signal]", cfg.Lifecycle.Sources)
	}
	if cfg.CloudWatch.Enabled {
		t.Error("cloudwatch.enabled is true: the agent would need AWS credentials")
	}
	example, err := config.Load([]byte(readFile(t, examplePath)), nil)
	if err != nil {
		t.Fatalf("example config does not validate: %v", err)
	}
	if cfg.Drain.Timeout != example.Drain.Timeout || len(cfg.Diagnostics) != len(example.Diagnostics) ||
		len(cfg.Limiter.Rules) != len(example.Limiter.Rules) {
		t.Error("packaged config lost the example's drain timeout, diagnostics or limiter rules")
	}
}

// TestPackagedConfigUncommentsToExample: every line of the example's body
// is in the packaged config, as is or commented out, in the same order, so
// an operator turns it into the fleet config by uncommenting.
func TestPackagedConfigUncommentsToExample(t *testing.T) {
	packaged := strings.Split(readFile(t, packagedPath), "\n")
	i := 0
	for _, line := range strings.Split(readFile(t, examplePath), "\n") {
		if strings.HasPrefix(line, "#") && i == 0 {
			continue // the example's header
		}
		for i < len(packaged) && packaged[i] != line && packaged[i] != "# "+line {
			i++
		}
		if i == len(packaged) {
			t.Fatalf("example line %q is missing from %s (as is or commented out)", line, packagedPath)
		}
		i++
	}
}

// TestDropInExecStart: the packaged unit runs the packaged binary with the
// shipped unit's arguments, and resets ExecStart first (systemd rejects a
// second ExecStart= in a simple or notify service otherwise).
func TestDropInExecStart(t *testing.T) {
	execStarts := func(path string) []string {
		var v []string
		for _, line := range strings.Split(readFile(t, path), "\n") {
			if s, ok := strings.CutPrefix(line, "ExecStart="); ok {
				v = append(v, s)
			}
		}
		return v
	}
	unit := execStarts(unitPath)
	if len(unit) != 1 || !strings.HasPrefix(unit[0], "/usr/local/bin/autodiag ") {
		t.Fatalf("%s: ExecStart = %q, want one, of /usr/local/bin/autodiag", unitPath, unit)
	}
	want := []string{"", "/usr/bin/autodiag " + strings.TrimPrefix(unit[0], "/usr/local/bin/autodiag ")}
	if got := execStarts(dropInPath); !slices.Equal(got, want) {
		t.Fatalf("%s: ExecStart lines = %q, want %q", dropInPath, got, want)
	}
}
