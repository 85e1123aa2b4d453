package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// lab owns every process and server the scenarios start, so that one stop
// ends them all whatever happened.
type lab struct {
	dir  string
	bin  string
	toxi string // toxiproxy-server binary, "" when not installed
	imds string // ec2-metadata-mock binary, "" when not installed

	mu    sync.Mutex
	procs []*exec.Cmd

	sqs    *sqsfake.Server
	sqsURL string
	client *sqs.Client
	hs     *http.Server
}

// spawn starts a command in its own process group, tracked for stopAll.
func (l *lab) spawn(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	l.mu.Lock()
	l.procs = append(l.procs, cmd)
	l.mu.Unlock()
	return nil
}

// stopAgents kills the process group of everything spawned so far
// (agents, redis-server, toxiproxy) and of their children: an agent runs
// each diagnostic in a process group of its own. Each process is stopped
// first so it starts nothing while its children are found.
func (l *lab) stopAgents() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.procs {
		if c.Process != nil {
			_ = syscall.Kill(c.Process.Pid, syscall.SIGSTOP)
		}
	}
	children := childrenByParent()
	for _, c := range l.procs {
		if c.Process != nil {
			killTree(c.Process.Pid, children)
		}
	}
	l.procs = nil
}

// killTree kills the process groups of pid's children, then pid's own.
func killTree(pid int, children map[int][]int) {
	for _, child := range children[pid] {
		_ = syscall.Kill(-child, syscall.SIGKILL)
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// childrenByParent maps each process to its children, from /proc.
func childrenByParent() map[int][]int {
	out := map[int][]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			out[ppid] = append(out[ppid], pid)
		}
	}
	return out
}

// stopAll stops every process and the SQS fake.
func (l *lab) stopAll() {
	l.stopAgents()
	if l.sqs != nil {
		l.sqs.Close()
	}
	if l.hs != nil {
		_ = l.hs.Close()
	}
}

// startSQS serves an sqsfake on a loopback port for the whole run.
func (l *lab) startSQS() error {
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("sqs listener: %w", err)
	}
	l.sqsURL = "http://" + ln.Addr().String()
	l.sqs = sqsfake.New(sqsfake.WithBaseURL(l.sqsURL))
	l.hs = &http.Server{Handler: l.sqs, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = l.hs.Serve(ln) }()
	l.client = sqs.NewFromConfig(sqsfake.SDKConfig(l.sqsURL))
	return nil
}

func (l *lab) queue(name string, attrs map[string]string) (string, error) {
	url, err := l.sqs.CreateQueue(name, attrs)
	if err != nil {
		return "", fmt.Errorf("create queue %s: %w", name, err)
	}
	return url, nil
}

// send puts bodies on the queue, 10 per SendMessageBatch.
func (l *lab) send(url string, bodies ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(bodies) > 0 {
		n := min(10, len(bodies))
		entries := make([]types.SendMessageBatchRequestEntry, n)
		for i, b := range bodies[:n] {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(b)}
		}
		out, err := l.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("send: %d entries failed", len(out.Failed))
		}
		bodies = bodies[n:]
	}
	return nil
}

// drained reports whether every message sent to the queue was deleted.
func (l *lab) drained(name string) bool {
	v, i, d, st, ok := l.sqs.Stats(name)
	return ok && v == 0 && i == 0 && d == 0 && st.Deleted == st.Sent
}

func freeAddr() (string, error) {
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// --- redis-server -------------------------------------------------------------

// redisSrv is a redis-server the runner owns, so a scenario can kill it.
type redisSrv struct {
	l    *lab
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

func (l *lab) newRedis(name string) (*redisSrv, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r := &redisSrv{l: l, addr: addr, dir: filepath.Join(l.dir, "redis-"+name)}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("redis dir: %w", err)
	}
	return r, r.start()
}

// start runs redis-server (empty: no persistence) and waits until it answers.
func (r *redisSrv) start() error {
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.CommandContext(context.Background(), "redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"))
	if err := r.l.spawn(r.cmd); err != nil {
		return err
	}
	r.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(r.cmd, r.done)
	c := r.client()
	defer c.Close()
	if !eventually(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	}) {
		return errors.New("redis-server did not answer within 10s")
	}
	return nil
}

func (r *redisSrv) kill() {
	if r.cmd == nil {
		return
	}
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	<-r.done
	r.cmd = nil
}

func (r *redisSrv) client() *redis.Client { return redis.NewClient(&redis.Options{Addr: r.addr}) }

// --- the agent ------------------------------------------------------------------

// agent is one `autodiag run` child process whose JSON log lines are kept.
type agent struct {
	name  string
	cmd   *exec.Cmd
	addr  string
	mu    sync.Mutex
	lines []map[string]any
	raw   bytes.Buffer
	ready chan string
	done  chan struct{}
}

// startAgent runs the binary with yaml and waits for its "ready" line.
func (l *lab) startAgent(name, yaml string, env ...string) (*agent, error) {
	a, err := l.spawnAgent(name, yaml, env...)
	if err != nil {
		return nil, err
	}
	select {
	case a.addr = <-a.ready:
		return a, nil
	case <-a.done:
		return nil, fmt.Errorf("agent %s exited before ready: %s", name, lastLines(a.output(), 5))
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("agent %s not ready after 30s", name)
	}
}

func (l *lab) spawnAgent(name, yaml string, env ...string) (*agent, error) {
	cfg := filepath.Join(l.dir, name+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+".yaml")
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	a := &agent{name: name, ready: make(chan string, 1), done: make(chan struct{})}
	a.cmd = exec.CommandContext(context.Background(), l.bin, "run", "--config", cfg)
	a.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + l.dir,
		"AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true", "AWS_ENDPOINT_URL_SQS=" + l.sqsURL}, env...)
	stderr, err := a.cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	if err := l.spawn(a.cmd); err != nil {
		return nil, err
	}
	go func() {
		a.scan(stderr)
		_ = a.cmd.Wait()
		close(a.done)
	}()
	return a, nil
}

func (a *agent) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		_ = json.Unmarshal(sc.Bytes(), &m)
		a.mu.Lock()
		a.raw.Write(sc.Bytes())
		a.raw.WriteByte('\n')
		if m != nil {
			m["_at"] = time.Now()
			a.lines = append(a.lines, m)
			if s, ok := m["admin_addr"].(string); ok && m["msg"] == "ready" {
				select {
				case a.ready <- s:
				default:
				}
			}
		}
		a.mu.Unlock()
	}
}

func (a *agent) output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.raw.String()
}

// logs returns the log lines with msg ("" = all).
func (a *agent) logs(msg string) []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []map[string]any
	for _, l := range a.lines {
		if msg == "" || l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

func (a *agent) alive() bool {
	select {
	case <-a.done:
		return false
	default:
		return true
	}
}

// wait returns the exit code, or -1 when the agent is still running after d.
func (a *agent) wait(d time.Duration) int {
	select {
	case <-a.done:
		return a.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		return -1
	}
}

func (a *agent) kill9() {
	_ = a.cmd.Process.Kill()
	<-a.done
}

func (a *agent) get(path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.addr+path, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", path, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", path, err)
	}
	return b, nil
}

// post sends a JSON body and returns the status code and the decoded
// answer; the bound is generous because a burst queues at the intake.
func (a *agent) post(client *http.Client, path, body string) (int, map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.addr+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("post %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("post %s: %w", path, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

// outcomes returns the outcome counters of /v1/status.
func (a *agent) outcomes() map[string]int {
	out := map[string]int{}
	b, err := a.get("/v1/status")
	if err != nil {
		return out
	}
	var st struct {
		Outcomes map[string]float64 `json:"outcomes"`
	}
	_ = json.Unmarshal(b, &st)
	for k, v := range st.Outcomes {
		out[k] = int(v)
	}
	return out
}

// metric sums the series of name whose label set contains every labels
// element (e.g. `op="claim"`); 0 when absent.
func (a *agent) metric(name string, labels ...string) float64 {
	b, err := a.get("/metrics")
	if err != nil {
		return 0
	}
	sum := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
	}
	return sum
}

// --- the diagnostics' ledger --------------------------------------------------

// ledger is the file every diagnostic of the catalog appends its task id
// to, one line per execution with the time, so executions are counted and
// timed per id.
type ledger struct {
	path, script, gate string
}

func (l *lab) newLedger(name string) (*ledger, error) {
	dir := filepath.Join(l.dir, "ledger-"+name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	led := &ledger{path: filepath.Join(dir, "ledger"), script: filepath.Join(dir, "mark.sh"), gate: filepath.Join(dir, "gate")}
	// /bin/sh SCRIPT ID [secs|gate]: the id only ever travels as argv.
	script := fmt.Sprintf(`#!/bin/sh
printf '%%s %%s\n' "$1" "$(date +%%s.%%N)" >> '%s'
case "$2" in
'') ;;
gate) n=0; while [ ! -e '%s' ] && [ $n -lt 3000 ]; do /bin/sleep 0.02; n=$((n+1)); done ;;
*) exec /bin/sleep "$2" ;;
esac
`, led.path, led.gate)
	if err := os.WriteFile(led.script, []byte(script), 0o644); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return led, nil
}

func (l *ledger) open() { _ = os.WriteFile(l.gate, nil, 0o644) }

// counts returns executions per task id and the first execution's time.
func (l *ledger) counts() (map[string]int, map[string]time.Time) {
	n, first := map[string]int{}, map[string]time.Time{}
	b, err := os.ReadFile(l.path)
	if err != nil {
		return n, first
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id, ts, _ := strings.Cut(line, " ")
		if id == "" {
			continue
		}
		n[id]++
		if f, err := strconv.ParseFloat(ts, 64); err == nil {
			if _, ok := first[id]; !ok {
				sec := int64(f)
				first[id] = time.Unix(sec, int64((f-float64(sec))*1e9))
			}
		}
	}
	return n, first
}

// agentConfig is the YAML of one agent on a fake queue; the catalog is
// mark (append to the ledger), short (then sleep 0.1 s), gate (then wait
// for the gate), noop (/bin/true).
type agentConfig struct {
	instance     string
	workers      int
	queueURL     string // "" = embedded (admin intake only)
	dlqURL       string
	visibility   time.Duration
	redisAddr    string
	prefix       string
	redisTimeout time.Duration
	stateFail    string
	ledger       *ledger
	rules        string // limiter rules, YAML list items indented four spaces
	limiterFail  string
	waitTime     time.Duration // queue.wait_time; 0 = 2s
	catalog      string        // more diagnostics, YAML list items indented two spaces
}

func (c agentConfig) yaml() string {
	var b strings.Builder
	vis := c.visibility
	if vis == 0 {
		vis = 2 * time.Second
	}
	wait := c.waitTime
	if wait == 0 {
		wait = 2 * time.Second
	}
	fmt.Fprintf(&b, "instance_id: %s\nadmin_addr: 127.0.0.1:0\nworkers: %d\n", c.instance, c.workers)
	if c.queueURL != "" {
		fmt.Fprintf(&b, "queue:\n  url: '%s'\n  wait_time: %s\n  batch_size: 10\n  visibility_timeout: %s\n", c.queueURL, wait, vis)
		if c.dlqURL != "" {
			fmt.Fprintf(&b, "  dlq_url: '%s'\n", c.dlqURL)
		}
	}
	if c.redisAddr != "" {
		timeout := c.redisTimeout
		if timeout == 0 {
			timeout = 2 * time.Second
		}
		fmt.Fprintf(&b, "redis:\n  url: 'redis://%s/0'\n  prefix: '%s'\n  timeout: %s\n", c.redisAddr, c.prefix, timeout)
		if c.stateFail != "" {
			fmt.Fprintf(&b, "  state_fail: %s\n", c.stateFail)
		}
	}
	b.WriteString("diagnostics:\n  - name: noop\n    command: [/bin/true]\n    timeout: 60s\n")
	if c.ledger != nil {
		for _, d := range []struct{ name, arg string }{{"mark", ""}, {"short", "0.1"}, {"gate", "gate"}} {
			fmt.Fprintf(&b, "  - name: %s\n    command: [/bin/sh, '%s', '{id}'", d.name, c.ledger.script)
			if d.arg != "" {
				fmt.Fprintf(&b, ", '%s'", d.arg)
			}
			b.WriteString("]\n    timeout: 60s\n")
		}
		fmt.Fprintf(&b, "  - name: param\n    command: [/bin/sh, '%s', '{id}', '{param.secs}']\n    params: {secs: '[0-9]'}\n    timeout: 60s\n", c.ledger.script)
	}
	b.WriteString(c.catalog)
	b.WriteString("limiter:\n")
	if c.limiterFail != "" {
		fmt.Fprintf(&b, "  fail: %s\n", c.limiterFail)
	}
	b.WriteString("  hosts:\n    allow: ['^[a-z0-9-]+(\\.[a-z0-9-]+)*$']\n")
	if c.rules == "" {
		b.WriteString("  rules: []\n")
	} else {
		b.WriteString("  rules:\n" + c.rules)
	}
	return b.String()
}

func taskBody(id, diagnostic string) string {
	return fmt.Sprintf(`{"id":%q,"host":"web-1","diagnostic":%q}`, id, diagnostic)
}

// eventually polls cond every 20 ms until it holds or d passes.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s" }
