package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	rootcause "github.com/autodiag/autodiag/agent/report"
)

// TestReportEmbeddedNeedsNoConfig: without Redis, `autodiag report ID`
// asks the local agent, which has its own report section and model key;
// it needs neither a --config with report.enabled nor the key in the
// CLI's own environment.
func TestReportEmbeddedNeedsNoConfig(t *testing.T) {
	t.Setenv("AUTODIAG_CONFIG", "")
	var asked []string
	agentSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.Method+" "+r.URL.Path)
		_ = json.NewEncoder(w).Encode(rootcause.Result{Status: rootcause.StatusOK, Provider: "openai", Model: "m", Markdown: "## Root cause\nThe disk is full.\n"})
	}))
	defer agentSrv.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"report", "t-1", "--admin-addr", strings.TrimPrefix(agentSrv.URL, "http://")}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "report: ok") || !strings.Contains(stdout.String(), "The disk is full.") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and the agent's report", code, stdout.String(), stderr.String())
	}
	if len(asked) != 1 || asked[0] != "POST /v1/tasks/t-1/report" {
		t.Fatalf("agent asked %v, want one POST /v1/tasks/t-1/report", asked)
	}
}

// TestConfigValidateFileArgumentHint: a file given as an argument is a
// usage error that shows the command to type, not "unknown command".
func TestConfigValidateFileArgumentHint(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"config", "validate", "my.yaml"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "autodiag config validate --config my.yaml") ||
		strings.Contains(stderr.String(), "unknown command") {
		t.Fatalf("exit %d, stderr %q; want 2 and the hint to use --config my.yaml", code, stderr.String())
	}
}

// TestFlagHelpShowsNoValueNameForBools: pflag reads a `quoted` word in a
// flag's usage as its value's name, so a backtick in a bool flag's usage
// printed "--strict run", which reads as a flag taking the value "run".
// No flag of the tree has a backtick in its usage.
func TestFlagHelpShowsNoValueNameForBools(t *testing.T) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		check := func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				name, _ := pflag.UnquoteUsage(f)
				t.Errorf("%s --%s: usage %q has a backtick; help shows it as --%s %s", cmd.CommandPath(), f.Name, f.Usage, f.Name, name)
			}
		}
		cmd.LocalFlags().VisitAll(check)
		cmd.PersistentFlags().VisitAll(check)
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&bytes.Buffer{}, &bytes.Buffer{}))
}

// TestRunHelpTellsSignalsDrainAndExitCodes: `run --help` says what a
// signal does, what a second one does, and every exit code.
func TestRunHelpTellsSignalsDrainAndExitCodes(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"run", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("run --help: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"SIGTERM", "drain", "second SIGTERM", "fast exit", "Exit codes", "  0 ", "  1 ", "  2 ", "  75 "} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("run --help lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestCLIPageHasEveryCommand: docs/cli.md says it lists every command;
// each command of the cobra tree is named there ("`autodiag PATH ...`").
func TestCLIPageHasEveryCommand(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			row := regexp.MustCompile("`" + regexp.QuoteMeta(sub.CommandPath()) + "[ `]")
			if sub.Runnable() && !row.MatchString(string(page)) {
				t.Errorf("docs/cli.md has no row for %s", sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(newRoot(&bytes.Buffer{}, &bytes.Buffer{}))
}
