package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const embeddedConfig = `
admin_addr: 127.0.0.1:0
workers: 2
diagnostics:
  - name: sleep
    command: [/bin/sleep, "{param.secs}"]
    params: {secs: '[0-9]+(\.[0-9]+)?'}
    timeout: 1m
  - name: uptime
    command: [/usr/bin/uptime]
    timeout: 10s
limiter:
  hosts:
    allow: ['^[a-z0-9-]+(\.[a-z0-9-]+)*$']
  rules: []
`

// TestEmbeddedBinarySIGTERM: the real binary on
// embedded defaults runs a POSTed task, rejects an invalid one with a
// reason, and on SIGTERM with tasks running finishes them while /readyz is
// 503, then exits 0.
func TestEmbeddedBinarySIGTERM(t *testing.T) {
	p := startProc(t, embeddedConfig)
	if code, out := p.post("/v1/tasks", `{"id":"ok-1","host":"web-01.example.com","diagnostic":"uptime"}`); code != http.StatusAccepted || out["id"] != "ok-1" {
		t.Fatalf("valid task: %d %v", code, out)
	}
	eventually(t, 20*time.Second, "ok-1 succeeded", func() bool {
		o, _ := p.status()["outcomes"].(map[string]any)
		return o["succeeded"] == float64(1)
	})
	code, out := p.post("/v1/tasks", `{"host":"$(reboot)","diagnostic":"uptime"}`)
	if code != http.StatusBadRequest || out["reason"] != "invalid_host" {
		t.Fatalf("invalid task: %d %v", code, out)
	}
	m := p.metrics()
	for _, want := range []string{`autodiag_task_outcomes_total{diagnostic="uptime",outcome="succeeded"} 1`,
		`autodiag_task_outcomes_total{diagnostic="uptime",outcome="rejected"} 1`} {
		if !strings.Contains(m, want) {
			t.Fatalf("/metrics lacks %s", want)
		}
	}

	// Long enough that the drain, during which /readyz answers 503, outlasts
	// a loaded runner holding this test back: the agent exits once it ends,
	// and then /readyz answers nothing.
	for _, id := range []string{"s-1", "s-2", "s-3"} {
		if code, _ := p.post("/v1/tasks", `{"id":"`+id+`","host":"web-01.example.com","diagnostic":"sleep","params":{"secs":"2"}}`); code != http.StatusAccepted {
			t.Fatalf("POST %s = %d", id, code)
		}
	}
	eventually(t, 20*time.Second, "two running", func() bool { return p.status()["inflight"] == float64(2) })
	p.signal(syscall.SIGTERM)
	eventually(t, 5*time.Second, "/readyz 503", func() bool { return p.getCode("/readyz") == http.StatusServiceUnavailable })
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	ended := map[string]string{}
	for _, l := range p.logs("task ended") {
		ended[l["task_id"].(string)] = l["outcome"].(string)
	}
	for _, id := range []string{"s-1", "s-2", "s-3"} {
		if ended[id] != "succeeded" {
			t.Errorf("task %s ended %q, want succeeded (received work finishes on SIGTERM)", id, ended[id])
		}
	}
	if len(p.logs("drained")) != 1 {
		t.Fatal("no drained log line")
	}
}

func TestConfigValidateCLI(t *testing.T) {
	// The example's imds source needs an instance id; this host has none
	// to discover, and instance metadata is not to be asked from a test.
	exampleEnv := []string{"AUTODIAG_INSTANCE_ID=i-0123456789abcdef0", "AWS_EC2_METADATA_DISABLED=true"}
	code, stdout, stderr := runCLI(t, exampleEnv, "config", "validate", "--config", filepath.Join("..", "..", "deploy", "config", "example.yaml"))
	if code != 0 {
		t.Fatalf("deploy/config/example.yaml: exit %d\n%s%s", code, stdout, stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("workers: 0\nqueue:\n  batch_size: 20\n  colour: blue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, nil, "config", "validate", "--config", bad)
	if code != 2 || !strings.Contains(stderr, "queue.colour (line 4): unknown key") {
		t.Fatalf("unknown key: exit %d, stderr %q", code, stderr)
	}
	if err := os.WriteFile(bad, []byte("workers: 0\nqueue:\n  batch_size: 20\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, nil, "config", "validate", "--config", bad)
	if code != 2 || !strings.Contains(stderr, "workers (line 1)") || !strings.Contains(stderr, "queue.batch_size (line 3)") {
		t.Fatalf("every problem at once: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, []string{"AUTODIAG_CONFIG=" + bad}, "run")
	if code != 2 {
		t.Fatalf("run with a bad AUTODIAG_CONFIG: exit %d, want 2 (%s)", code, stderr)
	}
}

func TestCLIBasics(t *testing.T) {
	if code, out, _ := runCLI(t, nil, "--version"); code != 0 || !strings.Contains(out, "dev") {
		t.Fatalf("--version: %d %q", code, out)
	}
	code, out, _ := runCLI(t, nil, "--help")
	for _, sub := range []string{"run", "enqueue", "status", "limits", "config", "drain"} {
		if code != 0 || !strings.Contains(out, "  "+sub+" ") {
			t.Errorf("--help does not list %s", sub)
		}
	}
	if code, _, _ := runCLI(t, nil, "frobnicate"); code != 2 {
		t.Fatalf("unknown command exit %d, want 2", code)
	}
	if code, _, _ := runCLI(t, nil, "enqueue", "--host", "x"); code != 2 {
		t.Fatalf("enqueue without --diagnostic exit %d, want 2", code)
	}
	code, out, _ = runCLI(t, nil, "limits", "explain")
	if code != 0 || !strings.Contains(out, "default") {
		t.Fatalf("limits explain: %d %q", code, out)
	}
	// Without Redis the limiter lives in the running agent: with none
	// answering, the check says so instead of asking a fresh limiter.
	code, out, stderr := runCLI(t, nil, "limits", "check", "--host", "web-01", "--diagnostic", "uptime", "--admin-addr", "127.0.0.1:1")
	if code == 0 || !strings.Contains(stderr, "local agent did not answer") {
		t.Fatalf("limits check without an agent: %d %q %q", code, out, stderr)
	}
}
