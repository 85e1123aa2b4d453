package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent"
	"github.com/autodiag/autodiag/agent/config"
	rootcause "github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/outcome"
)

// `autodiag demo` shows in one command what the quick start shows in
// several: an embedded agent takes an alert's task to a result, denies
// the same task again with the limiter's reason and retry time, and has
// a failed check investigated by a model that calls two diagnostics and
// writes a report with its evidence and gaps; then it drains and exits.
//
// It needs no network, no account and no model server: the model is the
// scripted one of demomodel.go, and the demo talks to the agent's admin
// API and the agent to the model inside this process (demoTransport), so
// it runs even where loopback is down (`unshare -n`). The agent itself is
// the real one, on a configuration that config.Load validates as any file.

// demoModelHost is the host of the scripted model's base_url: a name that
// cannot resolve (RFC 2606 .invalid), served only by demoTransport.
const demoModelHost = "scripted-model.demo.invalid"

// demoAgentHost is the host the demo's own admin calls name; demoTransport
// hands them to the agent's admin handler.
const demoAgentHost = "agent.demo.invalid"

// demoModelKeyEnv is the report's api_key_env; the demo's environment
// lookup answers it, and the scripted model ignores it.
const demoModelKeyEnv = "AUTODIAG_DEMO_MODEL_KEY"

// demoConfig is the agent's configuration: the embedded defaults, a free
// loopback admin port, the quick start's once-a-minute rule, a catalog of
// the built-in diagnostics offered to investigations, and reports of
// failed tasks by the scripted model, investigating. The agent answers
// for the sample host: its diagnostics describe the machine that runs them.
var demoConfig = `instance_id: demo
host_names: [web-01.example.com]
admin_addr: 127.0.0.1:0
log_level: warn
diagnostics:
  - name: uptime
    command: [/usr/bin/uptime]
    timeout: 10s
  - name: disk-usage
    command: [/usr/bin/df, -h, '{param.mount}']
    params: {mount: '/[A-Za-z0-9/_.-]*'}
    timeout: 10s
    investigate: true
    description: disk usage of one mount point (df -h)
  - name: memory
    command: [/usr/bin/free, -m]
    timeout: 10s
    investigate: true
    description: memory and swap in MiB (free -m)
limiter:
  rules:
    - name: investigation
      match: {origin: [investigation]}
      key: host
      limits: [{window: {count: 10, per: 10m}}]
    - name: once-a-minute
      match: {diagnostic: [uptime]}
      key: host+diagnostic
      limits: [{min_interval: 1m}]
    - name: default
      key: host+diagnostic
      limits: [{window: {count: 30, per: 1m}}]
report:
  enabled: true
  provider: openai
  model: ` + demoModelName + `
  base_url: https://` + demoModelHost + `/v1
  api_key_env: ` + demoModelKeyEnv + `
  on: [failed]
  timeout: 10s
  investigate: {max_steps: 2, calls_per_step: 3, wall_time: 20s}
`

// The demo's tasks: an alert's task, the same again, and a check that
// fails (the mount is not there) and so gets a report.
const (
	demoHost      = "web-01.example.com"
	demoFirst     = `{"id":"demo-1","host":"web-01.example.com","diagnostic":"uptime","severity":"high","alert":{"source":"generic","name":"HighLoad","event_id":"demo-ev-1"}}`
	demoSecond    = `{"id":"demo-2","host":"web-01.example.com","diagnostic":"uptime","severity":"high","alert":{"source":"generic","name":"HighLoad","event_id":"demo-ev-2"}}`
	demoFailing   = `{"id":"demo-3","host":"web-01.example.com","diagnostic":"disk-usage","params":{"mount":"/srv/demo-data"},"severity":"high","alert":{"source":"generic","name":"DataVolumeFull","event_id":"demo-ev-3"}}`
	demoStepBound = 8 * time.Second
)

func demoCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "demo",
		Short: "A result, a denial and a root-cause report in one command: an embedded agent and a scripted model, no network, no account",
		Long: `Start an embedded agent (in-memory queue, limiter and state; admin API on a
free loopback port), post an alert's task and show its result, post it
again and show the limiter's denial with its reason and retry time, then
post a check that fails and show the root-cause investigation: the model
calls two diagnostics, which run as tasks, and writes a report whose
Evidence section cites their task ids and whose Gaps section lists what
it could not check. Then drain and exit 0.

The model is a scripted stand-in built into this command (model
"` + demoModelName + `"), not an LLM: its answers are fixed. Nothing leaves
the process: the demo reaches the agent and the agent the model in
memory, so it runs without a network (even under unshare -n). For a real
model, see docs/reports.md; for the same steps by hand, the README's
quick start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), c)
		},
	}
}

func runDemo(ctx context.Context, c *cli) error {
	start := time.Now()
	w := c.stdout
	cfg, err := config.Load([]byte(demoConfig), nil)
	if err != nil {
		return fmt.Errorf("demo: its configuration: %w", err)
	}
	// The agent's log is kept and shown only when the demo fails.
	var logs lockedBuffer
	log := newLogger(&logs, cfg.LogLevel)
	model := &scriptedModel{}
	// The openai provider uses http.DefaultClient: in this process it
	// reaches the scripted model and nothing else.
	prevTransport := http.DefaultTransport
	tr := &demoTransport{model: model}
	http.DefaultTransport = tr
	defer func() { http.DefaultTransport = prevTransport }()

	// Ctrl-C ends the demo as a second signal ends the agent: running
	// diagnostics are cancelled (their process groups killed), nothing is
	// left behind.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	a, closeAgent, err := agent.Open(runCtx, cfg, agent.OpenOptions{Logger: log, Version: version, Hostname: "demo",
		LookupEnv: func(k string) (string, bool) {
			if k == demoModelKeyEnv {
				return "demo-key-not-a-secret", true
			}
			return "", false
		}})
	if err != nil {
		return fmt.Errorf("demo: start the agent: %w", err)
	}
	defer closeAgent()
	admin, err := serveAdmin(runCtx, cfg.AdminAddr, a.Handler(), log.With("component", "admin"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer admin.Shutdown() //nolint:contextcheck // bounded by AdminShutdownTimeout, and runs after ctx may have ended
	tr.agent = a.Handler()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(runCtx) }()
	fail := func(err error) error {
		cancel()
		if rerr := <-runErr; rerr != nil {
			log.Info("demo: the agent's run ended", "err", rerr)
		}
		fmt.Fprintf(c.stderr, "agent log (tail):\n%s\n", tail(logs.String(), 30))
		return fmt.Errorf("demo: %w", err)
	}
	select {
	case <-a.Started():
	case err := <-runErr:
		runErr <- err
		return fail(fmt.Errorf("the agent stopped at start: %w", err))
	}

	fmt.Fprintf(w, "autodiag demo: an embedded agent (in-memory queue, limiter and state; no AWS, no Redis)\n"+
		"with a scripted model (%s) standing in for an LLM. Nothing leaves this process.\n"+
		"The agent's admin API listens on %s; the demo calls it in memory.\n\n", demoModelName, admin.Addr())

	client := &http.Client{Transport: tr, Timeout: demoStepBound}
	step := func(n int, title, body string, until func(taskview.Task) bool) (taskview.Task, error) {
		fmt.Fprintf(w, "== %d. %s\n$ curl -XPOST %s/v1/tasks -d '%s'\n", n, title, admin.Addr(), body)
		if err := demoPost(ctx, client, "/v1/tasks", body); err != nil {
			return taskview.Task{}, err
		}
		var id struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal([]byte(body), &id)
		return demoAwait(ctx, client, id.ID, until)
	}
	ended := func(v taskview.Task) bool { return v.Outcome != "" }

	v, err := step(1, "An alert's task runs and gets its result", demoFirst, ended)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(w, "$ autodiag show %s\n", v.ID)
	printTask(terminalOut(w, false), withoutReport(v))
	if v.Outcome != outcome.Succeeded {
		return fail(fmt.Errorf("task %s ended %s, want succeeded", v.ID, v.Outcome))
	}

	v, err = step(2, "The same task within the minute: the limiter denies it, with the reason and when to retry", demoSecond, ended)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(w, "$ autodiag show %s\n", v.ID)
	printTask(terminalOut(w, false), withoutReport(v))
	if v.Outcome != outcome.RateLimited {
		return fail(fmt.Errorf("task %s ended %s, want rate_limited", v.ID, v.Outcome))
	}

	v, err = step(3, "A check that fails gets a root-cause investigation: two tool calls, a report with evidence and gaps", demoFailing,
		func(v taskview.Task) bool { return v.Outcome != "" && len(v.Report) > 0 && string(v.Report) != "null" })
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(w, "$ autodiag show %s\n", v.ID)
	var shown strings.Builder
	printTask(terminalOut(&shown, false), withoutReport(v))
	fmt.Fprint(w, strings.TrimSuffix(shown.String(), "report: (none)\n"))
	var r rootcause.Result
	if err := json.Unmarshal(v.Report, &r); err != nil {
		return fail(fmt.Errorf("task %s's report: %w", v.ID, err))
	}
	if r.Investigation != nil {
		fmt.Fprintf(w, "\ninvestigation:\n%s", r.Investigation.Tree())
	}
	fmt.Fprintf(w, "\n$ autodiag report %s\n", v.ID)
	printReport(c, r)
	if r.Status != rootcause.StatusOK {
		return fail(fmt.Errorf("task %s's report is %s: %s", v.ID, r.Status, r.Reason))
	}

	fmt.Fprintf(w, "\n== 4. Drain: intake stops, running work finishes, the agent exits\n")
	a.Drain("demo", "the demo is done")
	select {
	case err := <-runErr:
		if err != nil {
			return fail(fmt.Errorf("drain: %w", err))
		}
	case <-time.After(demoStepBound):
		return fail(errors.New("the drain did not end in time"))
	}
	var st struct {
		Outcomes map[string]int64 `json:"outcomes"`
	}
	if body, err := demoGet(ctx, client, "/v1/status"); err == nil {
		_ = json.Unmarshal(body, &st)
	}
	var counts []string
	for _, o := range outcome.All() {
		if n := st.Outcomes[o]; n > 0 {
			counts = append(counts, fmt.Sprintf("%s %d", o, n))
		}
	}
	fmt.Fprintf(w, "drained: tasks %s (the investigation's tool calls included), %d model requests, %.1fs in all.\n",
		strings.Join(counts, ", "), model.count(), time.Since(start).Seconds())
	fmt.Fprintf(w, "\nNext: the quick start in the README runs the same steps by hand (autodiag run --config docs/quickstart.yaml).\n")
	return nil
}

// withoutReport is v with its report left out: the demo prints the
// report as `autodiag report` does, not as the record's JSON.
func withoutReport(v taskview.Task) taskview.Task {
	if len(v.Report) > 0 && string(v.Report) != "null" {
		v.Report = json.RawMessage(`null`)
	}
	return v
}

// demoPost posts body to the agent's admin API.
func demoPost(ctx context.Context, client *http.Client, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+demoAgentHost+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// demoGet reads path of the agent's admin API.
func demoGet(ctx context.Context, client *http.Client, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+demoAgentHost+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return b, nil
}

// demoAwait waits until the task's record satisfies until, within
// demoStepBound, looking again whenever the last look did not.
func demoAwait(ctx context.Context, client *http.Client, id string, until func(taskview.Task) bool) (taskview.Task, error) {
	deadline := time.Now().Add(demoStepBound)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var v taskview.Task
	for {
		if b, err := demoGet(ctx, client, "/v1/tasks/"+id); err == nil {
			v = taskview.Task{}
			if json.Unmarshal(b, &v) == nil && until(v) {
				return v, nil
			}
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("task %s: not done within %s (last seen: %q)", id, demoStepBound, v.Outcome)
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-tick.C:
		}
	}
}

// demoTransport serves the demo's two hosts in memory: the agent's admin
// API and the scripted model. Any other request is refused: the demo
// makes no network call.
type demoTransport struct {
	model http.Handler
	agent http.Handler
}

func (t *demoTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var h http.Handler
	switch req.URL.Hostname() {
	case demoModelHost:
		h = t.model
	case demoAgentHost:
		h = t.agent
	}
	if h == nil {
		return nil, fmt.Errorf("demo: %s: the demo makes no network calls", req.URL.Host)
	}
	// As a server would see it: from loopback, with its request URI.
	in := req.Clone(req.Context())
	in.RemoteAddr, in.RequestURI = "127.0.0.1:1", req.URL.RequestURI()
	if in.Body == nil {
		in.Body = http.NoBody
	}
	rec := &memResponse{header: http.Header{}}
	h.ServeHTTP(rec, in)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", rec.code, http.StatusText(rec.code)), StatusCode: rec.code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rec.header, Body: io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		ContentLength: int64(rec.body.Len()), Request: req,
	}, nil
}

// memResponse is an http.ResponseWriter that keeps what it is given.
type memResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *memResponse) Header() http.Header { return r.header }

func (r *memResponse) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *memResponse) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// lockedBuffer is a buffer the agent's goroutines log into.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
