package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binPath is the autodiag binary the end-to-end tests run as a child
// process, built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "autodiag-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "autodiag")
	build := exec.CommandContext(context.Background(), "go", "build", "-o", binPath, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building autodiag:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one `autodiag run` child process.
//
// The agent's stderr goes to a file, not a pipe, and every look at the log
// reads the file up to its current end: a line the agent wrote before an
// effect the test observed (a call to a fake, a metric, a record in Redis)
// is then always seen, with no reader goroutine to lag behind. A line the
// agent writes after the effect still needs awaitLogsWhere or eventually.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	addr  string
	mu    sync.Mutex
	log   *os.File // the stderr file, read at off
	off   int64
	buf   []byte
	part  []byte // a line not yet ended by its newline
	lines []map[string]any
	raw   bytes.Buffer
	done  chan struct{}
	err   error
}

// startProc runs `autodiag run --config <yaml>` with extra environment
// entries and waits for its "ready" line.
func startProc(t *testing.T, yaml string, env ...string) *proc {
	t.Helper()
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, done: make(chan struct{})}
	logPath := filepath.Join(t.TempDir(), "stderr.jsonl")
	w, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // the child holds its own copy
	if p.log, err = os.Open(logPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.log.Close() })
	// Killed when the test ends, if it has not exited; the cleanup below
	// waits for it.
	p.cmd = exec.CommandContext(t.Context(), binPath, "run", "--config", cfgPath)
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true"}, env...)
	p.cmd.Stderr = w
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.mu.Lock()
		p.readLog()
		p.mu.Unlock()
		close(p.done)
	}()
	// p.raw and p.lines also follow the log while the agent runs, for
	// tests that read them under p.mu rather than through logs.
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-tick.C:
				p.mu.Lock()
				p.readLog()
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			p.mu.Lock()
			t.Logf("agent stderr (pid %d):\n%s", p.cmd.Process.Pid, lastLines(p.raw.String(), 60))
			p.mu.Unlock()
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Looked at before the log: once the agent has exited, its log is
		// whole.
		exited := false
		select {
		case <-p.done:
			exited = true
		default:
		}
		if l := p.logs("ready"); len(l) > 0 {
			if a, ok := l[0]["admin_addr"].(string); ok {
				// An agent that drains at once may exit just after its
				// ready line.
				p.addr = a
				return p
			}
		}
		if exited {
			t.Fatalf("agent exited before ready: %v\n%s", p.err, p.raw.String())
		}
		if time.Now().After(deadline) {
			t.Fatal("agent not ready after 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// readLog parses what the agent has written since the last call, whole
// lines only; p.mu is held.
func (p *proc) readLog() {
	if p.buf == nil {
		p.buf = make([]byte, 64<<10)
	}
	for {
		n, err := p.log.ReadAt(p.buf, p.off)
		p.off += int64(n)
		p.part = append(p.part, p.buf[:n]...)
		if err != nil || n == 0 {
			break
		}
	}
	for {
		i := bytes.IndexByte(p.part, '\n')
		if i < 0 {
			break
		}
		line := p.part[:i]
		p.raw.Write(line)
		p.raw.WriteByte('\n')
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m != nil {
			p.lines = append(p.lines, m)
		}
		p.part = p.part[i+1:]
	}
	p.part = bytes.Clone(p.part)
}

// logsWhere returns the JSON log lines whose fields equal the given
// key/value pairs, e.g. logsWhere("msg", "task deferred", "reason", "running_here").
func (p *proc) logsWhere(kv ...string) []map[string]any {
	var out []map[string]any
	for _, l := range p.logs("") {
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			if l[kv[i]] != kv[i+1] {
				match = false
				break
			}
		}
		if match {
			out = append(out, l)
		}
	}
	return out
}

// awaitLogsWhere is logsWhere once at least one line matches, failing the
// test if none does within 10 s: for a line the agent may write after the
// effect the test observed (an outcome seen through the queue, a metric or
// a sink).
func (p *proc) awaitLogsWhere(kv ...string) []map[string]any {
	p.t.Helper()
	eventually(p.t, 10*time.Second, fmt.Sprintf("a log line with %v", kv), func() bool { return len(p.logsWhere(kv...)) > 0 })
	return p.logsWhere(kv...)
}

// logs returns the JSON log lines with msg == msg ("" = all).
func (p *proc) logs(msg string) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readLog()
	var out []map[string]any
	for _, l := range p.lines {
		if msg == "" || l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

func (p *proc) signal(s syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatal(err)
	}
}

// wait returns the exit code, failing the test after timeout.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("agent did not exit within %v", timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) url(path string) string { return "http://" + p.addr + path }

// httpDo sends one request bound to the test's context; a POST's body is
// JSON.
func httpDo(t testing.TB, method, url, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	return http.DefaultClient.Do(req)
}

func (p *proc) post(path, body string) (int, map[string]any) {
	p.t.Helper()
	resp, err := httpDo(p.t, http.MethodPost, p.url(path), body)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (p *proc) getCode(path string) int {
	resp, err := httpDo(p.t, http.MethodGet, p.url(path), "")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// get is GET path on the agent, bounded by the test's context.
func (p *proc) get(path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(p.t.Context(), http.MethodGet, p.url(path), nil)
	if err != nil {
		return nil, err
	}
	return http.DefaultClient.Do(req)
}

// status fetches /v1/status.
func (p *proc) status() map[string]any {
	p.t.Helper()
	resp, err := httpDo(p.t, http.MethodGet, p.url("/v1/status"), "")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		p.t.Fatal(err)
	}
	return out
}

func (p *proc) metrics() string {
	p.t.Helper()
	resp, err := httpDo(p.t, http.MethodGet, p.url("/metrics"), "")
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// loadAllowance is what a wait bounded by the code's own constants (a poll
// interval, redis.timeout, a claim idle time) adds for the machine: CI runs
// two test binaries with -race on two cores beside one shared Redis, and
// the agents under test are processes that the scheduler can hold back
// for seconds. A wait ends as soon as its condition holds, so a passing
// test does not spend it.
const loadAllowance = 20 * time.Second

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runCLI runs the binary with args and returns exit code, stdout, stderr.
func runCLI(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), binPath, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}
