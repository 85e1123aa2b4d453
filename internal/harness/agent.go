package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// readyTimeout bounds an agent's start-up, from exec to its "ready" line:
// well under a second on a quiet host, the rest is room for a loaded one.
const readyTimeout = 30 * time.Second

// BaseEnv is the environment of every child that runs the binary: no
// credentials or region from the host, and the SDK never reaches the real
// instance metadata service.
func BaseEnv(home string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home,
		"AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret", "AWS_REGION=us-east-1",
		"AWS_EC2_METADATA_DISABLED=true"}
}

// AgentSpec is one `autodiag run` (or another command that takes
// --config).
type AgentSpec struct {
	Bin     string   // the binary (Build)
	Command string   // "" = run
	Dir     string   // where the config and the log file are written; the child's HOME
	Config  string   // the YAML
	Env     []string // after BaseEnv: a later entry wins
}

// Agent is one `autodiag run` child process.
//
// Its stderr goes to a file, not a pipe, and every look at the log reads
// the file up to its current end: a line the agent wrote before an effect
// the caller observed (a call to a fake, a metric, a record in Redis) is
// then always seen, with no reader to lag behind, and an agent nobody
// reads never blocks on a full pipe.
type Agent struct {
	*Process
	addr string

	mu    sync.Mutex
	log   *os.File // the stderr file, read at off
	off   int64
	buf   []byte
	part  []byte // a line not yet ended by its newline
	lines []map[string]any
	raw   bytes.Buffer
	whole bool // the agent has exited and its log was read to the end
}

// SpawnAgent starts the agent without waiting for it to be ready.
func SpawnAgent(s AgentSpec) (*Agent, error) {
	cfg, err := os.CreateTemp(s.Dir, "config-*.yaml")
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	_, err = cfg.WriteString(s.Config)
	if cerr := cfg.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	command := s.Command
	if command == "" {
		command = "run"
	}
	// Not bound to a context: whoever starts it kills it (Kill, KillTree,
	// Lab.Stop).
	cmd := exec.CommandContext(context.Background(), s.Bin, command, "--config", cfg.Name())
	cmd.Env = append(BaseEnv(s.Dir), s.Env...)
	return StartLogged(cmd, strings.TrimSuffix(cfg.Name(), ".yaml")+".stderr.jsonl")
}

// StartLogged starts cmd (any program that logs JSON lines to stderr: the
// agent, a bench's peer) in its own process group with its stderr going
// to the file logPath, followed as an Agent's log is.
func StartLogged(cmd *exec.Cmd, logPath string) (*Agent, error) {
	w, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	defer w.Close() // the child holds its own copy
	r, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("log file: %w", err)
	}
	cmd.Stderr = w
	p, err := StartProcess(cmd)
	if err != nil {
		r.Close()
		return nil, err
	}
	a := &Agent{Process: p, log: r}
	go func() {
		<-p.done
		// Once the agent has exited, its log is whole.
		a.mu.Lock()
		a.readLog()
		a.whole = true
		a.log.Close()
		a.mu.Unlock()
	}()
	return a, nil
}

// AwaitReady waits up to d for the "ready" line and takes the admin
// address from it. An agent that drains at once may exit just after it.
func (a *Agent) AwaitReady(d time.Duration) error {
	line, err := a.AwaitLog("ready", d)
	if err != nil {
		return err
	}
	addr, ok := line["admin_addr"].(string)
	if !ok {
		return fmt.Errorf("ready line without admin_addr: %v", line)
	}
	a.mu.Lock()
	a.addr = addr
	a.mu.Unlock()
	return nil
}

// AwaitLog waits up to d for the first log line with msg and returns it;
// an error when the process exits or d passes first.
func (a *Agent) AwaitLog(msg string, d time.Duration) (map[string]any, error) {
	deadline := time.Now().Add(d)
	for {
		exited := !a.Alive() // looked at before the log: then the log is whole
		if l := a.Logs(msg); len(l) > 0 {
			return l[0], nil
		}
		if exited {
			return nil, fmt.Errorf("exited before a %q line: %w\n%s", msg, a.Err(), LastLines(a.Output(), 20))
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no %q line after %s", msg, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readLog parses what the agent has written since the last call, whole
// lines only; a.mu is held.
func (a *Agent) readLog() {
	if a.buf == nil {
		a.buf = make([]byte, 64<<10)
	}
	for {
		n, err := a.log.ReadAt(a.buf, a.off)
		a.off += int64(n)
		a.part = append(a.part, a.buf[:n]...)
		if err != nil || n == 0 {
			break
		}
	}
	for {
		i := bytes.IndexByte(a.part, '\n')
		if i < 0 {
			break
		}
		line := a.part[:i]
		a.raw.Write(line)
		a.raw.WriteByte('\n')
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m != nil {
			a.lines = append(a.lines, m)
		}
		a.part = a.part[i+1:]
	}
	a.part = bytes.Clone(a.part)
}

// refresh reads the log up to its current end; a.mu is held.
func (a *Agent) refresh() {
	if !a.whole {
		a.readLog()
	}
}

// Output is everything the agent wrote to stderr so far.
func (a *Agent) Output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refresh()
	return a.raw.String()
}

// Logs returns the JSON log lines with msg == msg ("" = all).
func (a *Agent) Logs(msg string) []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refresh()
	var out []map[string]any
	for _, l := range a.lines {
		if msg == "" || l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// LogsWhere returns the JSON log lines whose fields equal the given
// key/value pairs, e.g. LogsWhere("msg", "task deferred", "reason", "running_here").
func (a *Agent) LogsWhere(kv ...string) []map[string]any {
	var out []map[string]any
	for _, l := range a.Logs("") {
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

// LogTime is when the agent wrote a log line: its own "time" field.
func LogTime(line map[string]any) (time.Time, error) {
	s, _ := line["time"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("log line without a time: %v", line)
	}
	return at, nil
}

// Addr is the admin API's host:port from the "ready" line.
func (a *Agent) Addr() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.addr
}

// URL is the admin API's URL of path.
func (a *Agent) URL(path string) string { return "http://" + a.Addr() + path }

// Do sends one request to the admin API, bound to ctx; a POST's body is
// JSON. client nil is http.DefaultClient.
func (a *Agent) Do(ctx context.Context, client *http.Client, method, path, body string) (*http.Response, error) {
	return HTTPDo(ctx, client, method, a.URL(path), body)
}

// HTTPDo sends one request bound to ctx; a POST's body is JSON. client nil
// is http.DefaultClient.
func HTTPDo(ctx context.Context, client *http.Client, method, url, body string) (*http.Response, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	return resp, nil
}

// Post sends a JSON body and returns the status code and the decoded
// answer (nil when it is not a JSON object).
func (a *Agent) Post(ctx context.Context, client *http.Client, path, body string) (int, map[string]any, error) {
	resp, err := a.Do(ctx, client, http.MethodPost, path, body)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, nil
}

// GetBody is the body of GET path.
func (a *Agent) GetBody(ctx context.Context, path string) ([]byte, error) {
	resp, err := a.Do(ctx, nil, http.MethodGet, path, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", path, err)
	}
	return b, nil
}

// Status is /v1/status, decoded.
func (a *Agent) Status(ctx context.Context) (map[string]any, error) {
	b, err := a.GetBody(ctx, "/v1/status")
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("/v1/status: %w", err)
	}
	return out, nil
}

// Outcomes are the outcome counters of /v1/status (empty when it cannot
// be read).
func (a *Agent) Outcomes(ctx context.Context) map[string]int {
	st, err := a.Status(ctx)
	if err != nil {
		return map[string]int{}
	}
	return OutcomeCounts(st)
}

// OutcomeCounts are the outcome counters of a decoded /v1/status.
func OutcomeCounts(status map[string]any) map[string]int {
	out := map[string]int{}
	o, _ := status["outcomes"].(map[string]any)
	for k, v := range o {
		if n, ok := v.(float64); ok {
			out[k] = int(n)
		}
	}
	return out
}

// Metrics is the text of /metrics.
func (a *Agent) Metrics(ctx context.Context) (string, error) {
	b, err := a.GetBody(ctx, "/metrics")
	return string(b), err
}

// Series is the value of the one series name{labels} (labels as written,
// e.g. `op="claim"`; "" for an unlabelled series) in a /metrics text, 0
// when absent.
func Series(metrics, name, labels string) float64 {
	prefix := name + " "
	if labels != "" {
		prefix = name + "{" + labels + "} "
	}
	for _, line := range strings.Split(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// Sum adds up the series of name whose label set contains every one of
// labels (e.g. `op="claim"`) in a /metrics text; 0 when there is none.
func Sum(metrics, name string, labels ...string) float64 {
	sum := 0.0
	for _, line := range strings.Split(metrics, "\n") {
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

// Metric is Sum over the agent's /metrics now; 0 when it cannot be read.
func (a *Agent) Metric(ctx context.Context, name string, labels ...string) float64 {
	m, err := a.Metrics(ctx)
	if err != nil {
		return 0
	}
	return Sum(m, name, labels...)
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WriteFile writes data to dir/name for a child to read (a config, a
// script) and returns the path.
func WriteFile(dir, name, data string, mode os.FileMode) (string, error) {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	return p, nil
}
