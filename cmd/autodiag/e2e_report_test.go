package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	rootcause "github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/internal/fake/openaifake"
	"github.com/autodiag/autodiag/internal/testenv"
)

const (
	reportKeyEnv  = "E2E_OPENAI_KEY"
	reportKey     = "sk-e2e-report-key"
	reportTimeout = 30 * time.Second // report.timeout of the test config
	reportDrain   = 3 * time.Second  // lifecycle.drain_timeout of the test config
	// reportHangTimeout is report.timeout where the model hangs: the
	// default, so a hung report holds its worker for a minute.
	reportHangTimeout = 60 * time.Second
)

// reportYAML is a fleet config (SQS fake, Redis) with the leak diagnostic
// and reports to the OpenAI fake (report.timeout timeout, 2 report
// workers): a 3m cooldown per host+diagnostic.
func reportYAML(t *testing.T, fq *sqsFake, prefix, instance, baseURL string, timeout time.Duration) string {
	cfg := sqsAgentConfig{instance: instance, workers: 2, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: prefix}
	yaml := strings.NewReplacer("command: [/bin/true, '{host}']\n    runs_on: any\n    timeout: 60s\n", "command: [/bin/true, '{host}']\n    runs_on: any\n    timeout: 2s\n").Replace(cfg.yaml())
	// leak probes {host} (runs_on any): any agent of a test's fleet runs it.
	yaml = strings.Replace(yaml, "limiter:\n", fmt.Sprintf("  - name: leak\n    command: [/bin/sh, '%s', '{host}']\n    runs_on: any\n    timeout: 2s\nlimiter:\n",
		leakScript(t)), 1)
	return yaml + fmt.Sprintf("lifecycle:\n  drain_timeout: %s\nreport:\n  enabled: true\n  provider: openai\n  model: e2e-model\n"+
		"  base_url: '%s'\n  api_key_env: %s\n  timeout: %s\n  workers: 2\n  limits:\n    - min_interval: 3m\n    - daily: 100\n",
		reportDrain, baseURL, reportKeyEnv, timeout)
}

// recordReport is the report in a task's record; ok=false while there is none.
func recordReport(t *testing.T, rc *redis.Client, prefix, id string) (rootcause.Result, bool) {
	t.Helper()
	rec, found := sqsTaskRecord(t, rc, prefix, id)
	if !found || len(rec.Report) == 0 {
		return rootcause.Result{}, false
	}
	var r rootcause.Result
	if err := json.Unmarshal(rec.Report, &r); err != nil {
		t.Fatalf("report of %s: %v: %s", id, err, rec.Report)
	}
	return r, true
}

// outboxEntries is what the notification outbox's streams (one per
// sink) hold, each stream oldest first.
func outboxEntries(t *testing.T, rc *redis.Client, prefix string) []redis.XMessage {
	t.Helper()
	keys, err := rc.Keys(t.Context(), prefix+"{notify}:outbox:*").Result()
	if err != nil {
		t.Fatalf("outbox: %v", err)
	}
	var msgs []redis.XMessage
	for _, k := range keys {
		m, err := rc.XRange(t.Context(), k, "-", "+").Result()
		if err != nil {
			t.Fatalf("outbox: %v", err)
		}
		msgs = append(msgs, m...)
	}
	return msgs
}

// assertReportEvent checks that entries are exactly one `report` event for
// sink, carrying task id with its ok report.
func assertReportEvent(t *testing.T, entries []redis.XMessage, sink, id string) {
	t.Helper()
	if len(entries) != 1 {
		t.Fatalf("outbox holds %d entries, want 1 report event: %v", len(entries), entries)
	}
	e := entries[0].Values
	if e["event"] != "report" || e["sink"] != sink {
		t.Errorf("outbox entry event %v sink %v, want report for %s", e["event"], e["sink"], sink)
	}
	body, _ := e["body"].(string)
	var ev struct {
		Event string `json:"event"`
		Task  struct {
			ID     string           `json:"id"`
			Report rootcause.Result `json:"report"`
		} `json:"task"`
	}
	if err := json.Unmarshal([]byte(body), &ev); err != nil || ev.Event != "report" || ev.Task.ID != id ||
		ev.Task.Report.Status != rootcause.StatusOK || ev.Task.Report.Markdown == "" {
		t.Errorf("report event body %s (%v), want task %s with its ok report", body, err, id)
	}
}

// A failed diagnostic gets an ok report in its record shortly after the
// model answered; the model never sees the secrets of the output; a second
// failure of the same host+diagnostic inside the cooldown is rate_limited
// with nothing sent; `autodiag report --force` skips the cooldown, stores
// the report and writes its `report` event to the notification outbox.
func TestReportWrittenLimitedRedactedE2E(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	fake := openaifake.New()
	t.Cleanup(fake.Close)
	yaml := reportYAML(t, fq, prefix, "agent-rep", fake.BaseURL(), reportTimeout)
	env := append([]string{reportKeyEnv + "=" + reportKey}, fq.env...)
	a := startProc(t, yaml, env...)

	fq.send(t, `{"id":"rep-1","host":"web-1","diagnostic":"leak","severity":"high","alert":{"source":"generic","name":"CredsCheck"}}`)
	eventually(t, 30*time.Second, "the model asked", func() bool { return len(fake.Requests()) == 1 })
	asked := time.Now()
	var r rootcause.Result
	// Bound: the model call, which report.timeout bounds (the fake answers
	// at once, but on a loaded machine its answer and the agent's handling
	// of it are not), and one store write, which redis.timeout (2s) does.
	eventually(t, reportTimeout+2*time.Second, "the report in the record", func() bool {
		var ok bool
		r, ok = recordReport(t, rc, prefix, "rep-1")
		return ok
	})
	t.Logf("REPORT report in the record %.3fs after the model was asked", time.Since(asked).Seconds())
	if r.Status != rootcause.StatusOK || r.Markdown == "" || r.Provider != "openai" || r.Model != "e2e-model" || r.Attempts != 1 {
		t.Errorf("report %+v, want ok from openai e2e-model in one attempt", r)
	}
	req := fake.Requests()[0]
	if req.Authorization != "Bearer "+reportKey {
		t.Errorf("Authorization %q, want the key from %s", req.Authorization, reportKeyEnv)
	}
	assertRedacted(t, "the request the model got", string(req.Body))
	if !strings.Contains(string(req.Body), "giving up") || !strings.Contains(string(req.Body), "web-1") {
		t.Errorf("request body lacks the output tail or the host: %s", req.Body)
	}

	// GET /v1/tasks/{id} shows it.
	resp, err := a.get("/v1/tasks/rep-1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var view struct {
		Outcome string           `json:"outcome"`
		Report  rootcause.Result `json:"report"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &view) != nil || view.Report.Status != rootcause.StatusOK {
		t.Errorf("GET /v1/tasks/rep-1: %d %s, want the ok report", resp.StatusCode, body)
	}

	// The same host+diagnostic again, inside the 3m cooldown.
	fq.send(t, `{"id":"rep-2","host":"web-1","diagnostic":"leak","severity":"high"}`)
	eventually(t, 30*time.Second, "the second report in the record", func() bool {
		r, _ = recordReport(t, rc, prefix, "rep-2")
		return r.Status != ""
	})
	if r.Status != rootcause.StatusRateLimited || r.Attempts != 0 || r.Reason == "" {
		t.Errorf("second report %+v, want rate_limited with a reason and nothing sent", r)
	}
	if n := len(fake.Requests()); n != 1 {
		t.Errorf("the model got %d requests, want 1 (the rate-limited report sends nothing)", n)
	}

	// On demand: the cooldown holds without --force, not with it.
	cfgPath := sqsWriteConfig(t, yaml)
	cliEnv := []string{reportKeyEnv + "=" + reportKey}
	if code, stdout, _ := runCLI(t, cliEnv, "report", "rep-2", "--config", cfgPath); code != 1 || !strings.Contains(stdout, "rate_limited") {
		t.Errorf("report rep-2 without --force: exit %d %q, want 1 and rate_limited", code, stdout)
	}
	if n := len(outboxEntries(t, rc, prefix)); n != 0 {
		t.Errorf("outbox holds %d entries with no sink configured, want 0", n)
	}
	// With a sink that wants `report`, the stored report's event goes to
	// the outbox for the agents to deliver; the CLI needs neither the
	// sink's URL nor its secret (their variables are not in its env).
	sinkCfg := sqsWriteConfig(t, yaml+"notify:\n  - name: oncall\n    type: webhook\n    url_env: E2E_REPORT_SINK_URL\n"+
		"    secret_env: E2E_REPORT_SINK_SECRET\n    on: [report]\n")
	code, stdout, stderr := runCLI(t, cliEnv, "report", "rep-2", "--force", "--config", sinkCfg)
	if code != 0 || !strings.Contains(stdout, "report: ok") {
		t.Fatalf("report rep-2 --force: exit %d %q %s, want 0 and an ok report", code, stdout, stderr)
	}
	if r, _ = recordReport(t, rc, prefix, "rep-2"); r.Status != rootcause.StatusOK {
		t.Errorf("record of rep-2 after --force: %+v, want the ok report stored", r)
	}
	assertReportEvent(t, outboxEntries(t, rc, prefix), "oncall", "rep-2")
	if code, _, stderr := runCLI(t, nil, "report", "rep-2", "--force", "--config", cfgPath); code != 2 || !strings.Contains(stderr, "report.api_key_env") {
		t.Errorf("report without the key variable: exit %d %s, want 2 naming report.api_key_env", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "run", "--config", cfgPath); code != 2 || !strings.Contains(stderr, "report.api_key_env") {
		t.Errorf("run without the key variable: exit %d %s, want 2 naming report.api_key_env", code, stderr)
	}
	code, stdout, _ = runCLI(t, nil, "show", "rep-1", "--config", cfgPath)
	if code != 0 || !strings.Contains(stdout, "report: ok") || strings.Contains(stdout, `"status"`) {
		t.Errorf("show rep-1: exit %d, want the ok report:\n%s", code, stdout)
	}

	a.signal(syscall.SIGTERM)
	if code := a.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after the drain, want 0", code)
	}
	assertNoSecret(t, "the agent's log", a.Output())
}

// A model that hangs delays neither the tasks' outcomes nor their message
// deletes nor the drain. With every report worker held by the model, each
// further failed task still ends, its message is deleted and its report
// job waits in the queue; the jobs in progress stay claimed by the agent,
// and a drain mid-report ends within its deadline, every job left queued
// for another agent.
func TestReportHangingProviderE2E(t *testing.T) {
	const (
		workers = 2  // report.workers of reportYAML
		more    = 10 // failed tasks sent once every report worker hangs
	)
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	fake := openaifake.New()
	t.Cleanup(fake.Close)
	fake.SetLatency(2 * reportHangTimeout) // past every bound of the test
	a := startProc(t, reportYAML(t, fq, prefix, "agent-hang", fake.BaseURL(), reportHangTimeout),
		append([]string{reportKeyEnv + "=" + reportKey}, fq.env...)...)

	// One host each, so that no report is held back by the cooldown.
	failed := func(i int) string {
		return fmt.Sprintf(`{"id":"hang-%d","host":"web-%d","diagnostic":"leak"}`, i, i)
	}
	for i := range workers {
		fq.send(t, failed(i))
	}
	eventually(t, 30*time.Second, "every report worker asking the model", func() bool { return len(fake.Requests()) == workers })
	// Until a hung report's timeout frees its worker, the counts below
	// are exact: no worker can take another job.
	freed := time.Now().Add(reportHangTimeout)
	rec, ok := sqsTaskRecord(t, rc, prefix, "hang-0")
	if !ok || rec.Outcome != "failed" || len(rec.Report) != 0 {
		t.Fatalf("record while the model hangs: %+v, want outcome failed and no report yet", rec)
	}

	bodies := []string{sqsTaskBody("ok-1", "noop")}
	for i := workers; i < workers+more; i++ {
		bodies = append(bodies, failed(i))
	}
	fq.send(t, bodies...)
	eventually(t, time.Until(freed), "every task ended and its message deleted", func() bool {
		if !fq.drained(t) {
			return false
		}
		for i := range workers + more {
			if r, ok := sqsTaskRecord(t, rc, prefix, fmt.Sprintf("hang-%d", i)); !ok || r.Outcome != "failed" {
				return false
			}
		}
		r, ok := sqsTaskRecord(t, rc, prefix, "ok-1")
		return ok && r.Outcome == "succeeded"
	})
	jobs := prefix + "{report}:jobs"
	queued, err := rc.XLen(t.Context(), jobs).Result()
	if err != nil {
		t.Fatal(err)
	}
	pend, err := rc.XPending(t.Context(), jobs, "autodiag").Result()
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().After(freed) {
		t.Fatalf("the checks took past report.timeout %s; the counts are no longer exact", reportHangTimeout)
	}
	if n := len(fake.Requests()); n != workers {
		t.Errorf("the model got %d requests, want %d: one per report worker, all of them held", n, workers)
	}
	if queued != workers+more {
		t.Errorf("report jobs in the queue: %d, want %d (one per failed task, none done)", queued, workers+more)
	}
	if pend.Count != workers || pend.Consumers["agent-hang"] != workers {
		t.Errorf("report jobs in progress: %d %v, want %d, all claimed by agent-hang", pend.Count, pend.Consumers, workers)
	}
	for i := range workers + more {
		if r, _ := sqsTaskRecord(t, rc, prefix, fmt.Sprintf("hang-%d", i)); len(r.Report) != 0 {
			t.Errorf("hang-%d has a report %s, want none while the model hangs", i, r.Report)
		}
	}

	start := time.Now()
	a.signal(syscall.SIGTERM)
	// The drain's deadline, and the process's exit after it; a loaded
	// machine may add loadAllowance, still far below the hang a drain
	// waiting on the model would take (report.timeout).
	if code := a.wait(reportDrain + loadAllowance + 5*time.Second); code != 0 {
		t.Fatalf("exit %d after the drain, want 0", code)
	}
	took := time.Since(start)
	t.Logf("REPORT drain with a hanging report took %.2fs (drain_timeout %s)", took.Seconds(), reportDrain)
	if took > reportDrain+loadAllowance {
		t.Errorf("the drain took %s, want at most drain_timeout %s and the exit", took, reportDrain)
	}
	if rec, _ := sqsTaskRecord(t, rc, prefix, "hang-0"); len(rec.Report) != 0 {
		t.Errorf("report of hang-0 = %s, want none (abandoned to the queue)", rec.Report)
	}
	if n, err := rc.XLen(t.Context(), jobs).Result(); err != nil || n != workers+more {
		t.Errorf("report jobs after the drain: %d %v, want all %d left queued for other agents", n, err, workers+more)
	}
}

// peakRSS is the highest resident set size of process pid so far (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("status of %d: %v", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				t.Fatalf("VmHWM %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// A model answering 100 MB does not take the agent's memory or time: the
// agent reads no further than report.max_answer_bytes' envelope, its peak
// RSS stays below 100 MiB, and the report ends failed with reason
// answer_too_large within report.timeout.
func TestReportHugeAnswerBoundedE2E(t *testing.T) {
	const timeout = 8 * time.Second
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	fake := openaifake.New()
	t.Cleanup(fake.Close)
	fake.SetHugeBytes(100 << 20)
	fake.Always(openaifake.Huge)
	yaml := reportYAML(t, fq, prefix, "agent-huge", fake.BaseURL(), timeout)
	a := startProc(t, yaml, append([]string{reportKeyEnv + "=" + reportKey}, fq.env...)...)
	fq.send(t, `{"id":"huge-1","host":"web-1","diagnostic":"leak","severity":"high","alert":{"source":"generic","name":"Big"}}`)
	eventually(t, 30*time.Second, "the model asked", func() bool { return len(fake.Requests()) == 1 })
	asked := time.Now()
	var r rootcause.Result
	eventually(t, timeout+2*time.Second, "the report in the record", func() bool {
		var ok bool
		r, ok = recordReport(t, rc, prefix, "huge-1")
		return ok
	})
	took := time.Since(asked)
	rss := peakRSS(t, a.Pid())
	t.Logf("REPORT 100 MB answer: report %s after %.3fs, agent peak RSS %d MiB", r.Status, took.Seconds(), rss>>20)
	if r.Status != rootcause.StatusFailed || !strings.HasPrefix(r.Reason, "answer_too_large") {
		t.Errorf("report %+v, want failed with answer_too_large", r)
	}
	if rss >= 100<<20 {
		t.Errorf("agent peak RSS %d MiB, want < 100 MiB", rss>>20)
	}
	if len(fake.Requests()) != 1 {
		t.Errorf("%d model calls, want 1 (answer_too_large is not retried)", len(fake.Requests()))
	}
}

// With report.investigate the binary's report runs the model's tool calls
// as tasks: the offered diagnostic runs through the agent's queue and
// records (origin investigation, its parent, investigation and step), the
// one not offered is refused and listed under Gaps, the model gets the
// result as a role tool message answering its call, and the record's
// report carries the investigation.
func TestReportInvestigationE2E(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	fake := openaifake.New()
	t.Cleanup(fake.Close)
	fake.Queue(openaifake.Reply{ToolCalls: []openaifake.ToolCall{
		{ID: "call_a", Name: "probe", Arguments: `{}`}, {ID: "call_b", Name: "rm_rf", Arguments: `{"host":"web-1"}`}}},
		openaifake.Reply{Text: `{"root_cause":"The probe shows nothing wrong.","category":"unknown","confidence":"confirmed","impact":"",` +
			`"gaps":["rm_rf is not offered"],"next_steps":[],"evidence":[{"task_id":"inv-made-up","quote":"probe-output-1234","claim":"probe ran"}]}`})
	yaml := reportYAML(t, fq, prefix, "agent-inv", fake.BaseURL(), reportTimeout)
	yaml = strings.Replace(yaml, "limiter:\n", "  - name: probe\n    command: [/bin/echo, probe-output-1234]\n    timeout: 2s\n"+
		"    investigate: true\n    description: prints a probe line\nlimiter:\n", 1)
	yaml += "  investigate: {max_steps: 2, daily_tokens: 1000000}\n"
	// probe looks at the machine itself: this agent answers for web-1.
	startProc(t, yaml, append([]string{reportKeyEnv + "=" + reportKey, "AUTODIAG_HOST_NAMES=web-1"}, fq.env...)...)
	fq.send(t, `{"id":"inv-parent","host":"web-1","diagnostic":"leak","severity":"high","alert":{"source":"generic","name":"Leak"}}`)
	var r rootcause.Result
	eventually(t, 60*time.Second, "the investigation's report in the record", func() bool {
		var ok bool
		r, ok = recordReport(t, rc, prefix, "inv-parent")
		return ok
	})
	inv := r.Investigation
	if r.Status != rootcause.StatusOK || inv == nil || inv.EndedBy != "answer" || len(inv.Steps) != 2 || len(inv.Steps[0].Calls) != 2 {
		t.Fatalf("report %+v investigation %+v", r, inv)
	}
	ran, refused := inv.Steps[0].Calls[0], inv.Steps[0].Calls[1]
	if ran.Result != "ran" || ran.Outcome != "succeeded" || refused.Result != "not_offered" || !strings.Contains(r.Markdown, "## Gaps") ||
		!strings.Contains(r.Markdown, "could not check `rm_rf` on web-1: not_offered") {
		t.Fatalf("calls %+v %+v, report:\n%s", ran, refused, r.Markdown)
	}
	tr, ok := sqsTaskRecord(t, rc, prefix, ran.TaskID)
	if !ok || tr.Origin != "investigation" || tr.Parent != "inv-parent" || tr.Investigation != inv.ID || tr.Step != 1 ||
		!strings.Contains(tr.Output, "probe-output-1234") || len(tr.Report) != 0 {
		t.Fatalf("tool call's record %+v", tr)
	}
	// The answer is of the schema; its citation of a task that is not
	// the investigation's is not verified, so it is not confirmed.
	if r.Answer == nil || r.Grounding == nil || r.Grounding.Cited != 1 || r.Grounding.Verified != 0 || r.Confidence != "likely" ||
		!strings.Contains(r.Markdown, "## Unverified citations") {
		t.Fatalf("answer %+v grounding %+v confidence %s", r.Answer, r.Grounding, r.Confidence)
	}
	reqs := fake.Requests()
	if len(reqs) != 2 || !strings.Contains(string(reqs[0].Body), `"name":"probe"`) || !strings.Contains(string(reqs[0].Body), `"response_format":{"type":"json_schema"`) ||
		!strings.Contains(string(reqs[1].Body), `"role":"tool","content":"task `+ran.TaskID) {
		t.Fatalf("requests %d: %s", len(reqs), reqs[len(reqs)-1].Body)
	}
	assertRedacted(t, "the investigation's requests", string(reqs[1].Body))
	used, err := rc.Get(t.Context(), prefix+"{investigate}:daily:"+time.Now().UTC().Format(time.DateOnly)+":tokens").Int64()
	if err != nil || used != int64(inv.InputTokens+inv.OutputTokens) {
		t.Fatalf("daily budget counter %d (%v), want %d", used, err, inv.InputTokens+inv.OutputTokens)
	}
}

// TestInvestigationRunsOnAlertHost: two agents on one queue and one
// Redis, each answering for its own host and offering probe, which prints
// the running agent's id. An alert for web-a's host is investigated with
// three probe calls: whichever agent receives each, all run on web-a's
// agent (their outputs and owners say agent-a). A call for a host no
// agent answers for is a gap with its reason.
func TestInvestigationRunsOnAlertHost(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	fake := openaifake.New()
	t.Cleanup(fake.Close)
	fake.Queue(openaifake.Reply{ToolCalls: []openaifake.ToolCall{
		{ID: "c1", Name: "probe", Arguments: `{}`}, {ID: "c2", Name: "probe", Arguments: `{}`}, {ID: "c3", Name: "probe", Arguments: `{}`}}})
	for _, inst := range []string{"agent-a", "agent-b"} {
		yaml := reportYAML(t, fq, prefix, inst, fake.BaseURL(), reportTimeout)
		yaml = strings.Replace(yaml, "limiter:\n", "  - name: probe\n    command: [/bin/echo, "+inst+"]\n    timeout: 2s\n"+
			"    investigate: true\n    description: prints the machine it runs on\nlimiter:\n", 1)
		yaml += "  investigate: {max_steps: 2, daily_tokens: 1000000, calls_per_step: 3}\n"
		host := strings.Replace(inst, "agent-", "web-", 1) + ".example"
		startProc(t, yaml, append([]string{reportKeyEnv + "=" + reportKey, "AUTODIAG_HOST_NAMES=" + host}, fq.env...)...)
	}
	eventually(t, 20*time.Second, "both agents' names published", func() bool {
		return rc.Exists(t.Context(), prefix+"hostname:web-a.example", prefix+"hostname:web-b.example").Val() == 2
	})
	fq.send(t, `{"id":"inv-a","host":"web-a.example","diagnostic":"leak","severity":"high","alert":{"source":"generic","name":"Leak"}}`)
	var r rootcause.Result
	eventually(t, 60*time.Second, "the investigation's report in the record", func() bool {
		var ok bool
		r, ok = recordReport(t, rc, prefix, "inv-a")
		return ok
	})
	inv := r.Investigation
	if inv == nil || len(inv.Steps) == 0 || len(inv.Steps[0].Calls) != 3 {
		t.Fatalf("report %+v investigation %+v", r, inv)
	}
	for _, c := range inv.Steps[0].Calls {
		tr, ok := sqsTaskRecord(t, rc, prefix, c.TaskID)
		if c.Result != "ran" || !ok || strings.TrimSpace(tr.Output) != "agent-a" || tr.Owner != "agent-a" {
			t.Errorf("tool call %+v: record %+v; want run on agent-a, the alert host's agent", c, tr)
		}
	}
}
