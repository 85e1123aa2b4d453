package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/testenv"
)

// Secrets the leaking diagnostic prints; none may reach the record, a log
// line, the CLI or a webhook.
const (
	leakAccessKey = "AKIAIOSFODNN7EXAMPLE"
	leakBearer    = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXRva2Vu.sig"
	leakSecretKey = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
	webhookSecret = "e2e-hmac-key"
)

// leakScript writes a diagnostic that prints an AWS key, an Authorization
// header and a secret key assignment, and fails.
func leakScript(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "leak.sh")
	script := fmt.Sprintf("#!/bin/sh\necho 'checking credentials'\necho 'key id: %s'\necho 'Authorization: Bearer %s'\n"+
		"echo 'aws_secret_access_key = %s'\necho 'giving up' >&2\nexit 3\n", leakAccessKey, leakBearer, leakSecretKey)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// hookRequest is one request the test's webhook receiver got.
type hookRequest struct {
	event, delivery, signature string
	body                       []byte
}

// hookReceiver is an httptest webhook receiver that answers failCode to
// the first failN requests and 200 after.
type hookReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	reqs     []hookRequest
	failN    int
	failCode int
}

func newHookReceiver(t *testing.T, failN int) *hookReceiver {
	return newHookReceiverCode(t, failN, http.StatusInternalServerError)
}

func newHookReceiverCode(t *testing.T, failN, failCode int) *hookReceiver {
	h := &hookReceiver{failN: failN, failCode: failCode}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		h.reqs = append(h.reqs, hookRequest{event: r.Header.Get(notify.HeaderEvent), delivery: r.Header.Get(notify.HeaderDelivery),
			signature: r.Header.Get(notify.HeaderSignature), body: body})
		fail := len(h.reqs) <= h.failN
		h.mu.Unlock()
		if fail {
			w.WriteHeader(h.failCode)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// of returns the requests of one event type.
func (h *hookReceiver) of(event string) []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookRequest
	for _, r := range h.reqs {
		if r.event == event {
			out = append(out, r)
		}
	}
	return out
}

func notifyYAML(url string, on ...string) string {
	return fmt.Sprintf("notify:\n  - name: hook\n    type: webhook\n    url: '%s/hook'\n    allow_http: true\n"+
		"    secret_env: E2E_WEBHOOK_SECRET\n    timeout: 5s\n    on: [%s]\n", url, strings.Join(on, ", "))
}

// assertNoSecret fails when s holds any of the leaked secrets.
func assertNoSecret(t *testing.T, where, s string) {
	t.Helper()
	for _, secret := range []string{leakAccessKey, leakBearer, leakSecretKey} {
		if strings.Contains(s, secret) {
			t.Errorf("%s holds the secret %q", where, secret)
		}
	}
}

// assertRedacted fails unless s carries the markers of the leaked secrets.
func assertRedacted(t *testing.T, where, s string) {
	t.Helper()
	for _, m := range []string{"[REDACTED:aws_access_key_id]", "[REDACTED:authorization]", "[REDACTED:token_assignment]"} {
		if !strings.Contains(s, m) {
			t.Errorf("%s lacks %s: %q", where, m, s)
		}
	}
	assertNoSecret(t, where, s)
}

// A failed diagnostic whose output holds secrets, in fleet mode (SQS,
// Redis): the record, the log line, `autodiag show` and the webhook carry
// markers, never the secrets; the webhook is signed, retried after a 500
// with the same delivery id, and told of the drain.
func TestResultsRedactedAndDelivered(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	hook := newHookReceiver(t, 1)
	cfg := sqsAgentConfig{instance: "agent-r", workers: 2, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: prefix}
	// cfg.yaml ends with the limiter section; the leak diagnostic goes in
	// the catalog, before it.
	yaml := strings.Replace(cfg.yaml(), "limiter:\n", fmt.Sprintf("  - name: leak\n    command: [/bin/sh, '%s', '{host}']\n    runs_on: any\n    timeout: 10s\nlimiter:\n",
		leakScript(t)), 1) + notifyYAML(hook.srv.URL, "failed", "drain_started", "drain_completed", "drain_failed")
	env := append([]string{"E2E_WEBHOOK_SECRET=" + webhookSecret}, fq.env...)
	a := startProc(t, yaml, env...)

	fq.send(t, `{"id":"leak-1","host":"web-1","diagnostic":"leak","severity":"high","alert":{"source":"generic","name":"CredsCheck"}}`)

	// Retried after the 500, then delivered: the same delivery id on both.
	eventually(t, 30*time.Second, "the failed event delivered on its second try", func() bool { return len(hook.of("failed")) >= 2 })
	tries := hook.of("failed")
	if tries[0].delivery == "" || tries[1].delivery != tries[0].delivery {
		t.Errorf("delivery ids %q then %q, want one id on every try", tries[0].delivery, tries[1].delivery)
	}
	for i, r := range tries {
		if !notify.Verify([]byte(webhookSecret), r.body, r.signature) {
			t.Errorf("try %d: signature %q does not verify", i+1, r.signature)
		}
		assertRedacted(t, fmt.Sprintf("webhook body (try %d)", i+1), string(r.body))
	}
	var ev notify.Event
	if err := json.Unmarshal(tries[1].body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Task == nil || ev.Task.ID != "leak-1" || ev.Task.Outcome != "failed" || ev.Task.ExitCode == nil || *ev.Task.ExitCode != 3 ||
		ev.Task.Alert == nil || ev.Task.Alert.Name != "CredsCheck" || ev.InstanceID != "agent-r" {
		t.Errorf("event %+v task %+v, want leak-1 failed with exit 3 from alert CredsCheck on agent-r", ev, ev.Task)
	}

	// The stored record.
	rec, ok := sqsTaskRecord(t, rc, prefix, "leak-1")
	if !ok || rec.Outcome != "failed" || rec.Severity != "high" || rec.ReceivedAt.IsZero() {
		t.Fatalf("record %+v, want failed with severity and receive time", rec)
	}
	assertRedacted(t, "stored record", rec.Output)

	// The log line, and nothing else in the log, holds the output.
	ended := a.awaitLogsWhere("msg", "task ended", "task_id", "leak-1")
	if len(ended) != 1 {
		t.Fatalf("%d task ended lines for leak-1, want 1", len(ended))
	}
	out, _ := ended[0]["output"].(string)
	assertRedacted(t, "task ended log line", out)
	assertNoSecret(t, "the agent's log", a.Output())

	// GET /v1/tasks/{id} and 404.
	resp, err := a.get("/v1/tasks/leak-1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/tasks/leak-1: %d %s", resp.StatusCode, body)
	}
	assertRedacted(t, "GET /v1/tasks/leak-1", string(body))
	var view map[string]any
	_ = json.Unmarshal(body, &view)
	if view["report"] != nil || view["outcome"] != "failed" || view["owner"] != "agent-r" {
		t.Errorf("GET /v1/tasks/leak-1 = %s, want outcome failed, owner agent-r, report null", body)
	}
	if _, has := view["report"]; !has {
		t.Error("report is missing; want it present as null")
	}
	assertNotFound(t, a, "/v1/tasks/unknown")

	// autodiag show reads Redis.
	cfgPath := sqsWriteConfig(t, yaml)
	code, stdout, stderr := runCLI(t, nil, "show", "leak-1", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr)
	}
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	// "ran on" names the agent that ran it: its instance id and the
	// hostname it learnt at start.
	for _, want := range []string{"task leak-1: failed", "web-1", "leak", "agent-r", "ran on:     agent-r (" + hostname + ")\n",
		"exit code:  3", "report: (none)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("show output lacks %q:\n%s", want, stdout)
		}
	}
	assertRedacted(t, "autodiag show", stdout)
	if code, _, _ := runCLI(t, nil, "show", "nope", "--config", cfgPath); code != 1 {
		t.Errorf("show of an unknown task: exit %d, want 1", code)
	}
	if code, _, _ := runCLI(t, nil, "show", "--config", cfgPath); code != 2 {
		t.Errorf("show without an id: exit %d, want 2", code)
	}

	if m := a.metrics(); !strings.Contains(m, `autodiag_redactions_total{name="aws_access_key_id"} 1`) {
		t.Errorf("metrics lack one aws_access_key_id redaction:\n%s", grepLines(m, "autodiag_redactions_total"))
	}

	// The drain tells the receiver it started and ended.
	a.signal(syscall.SIGTERM)
	if code := a.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after the drain, want 0", code)
	}
	if n := len(hook.of("drain_started")); n != 1 {
		t.Errorf("%d drain_started deliveries, want 1", n)
	}
	if n := len(hook.of("drain_completed")); n != 1 {
		t.Errorf("%d drain_completed deliveries, want 1", n)
	}
}

// Embedded mode (memory state and outbox): GET /v1/tasks/{id}, `autodiag
// show` through the admin API, `autodiag status` listing the id, and the
// webhook delivery.
func TestResultsEmbedded(t *testing.T) {
	hook := newHookReceiver(t, 0)
	yaml := fmt.Sprintf("admin_addr: 127.0.0.1:0\ndiagnostics:\n  - name: leak\n    command: [/bin/sh, '%s']\n    timeout: 10s\n",
		leakScript(t)) + notifyYAML(hook.srv.URL, "failed")
	a := startProc(t, yaml, "E2E_WEBHOOK_SECRET="+webhookSecret)
	code, posted := a.post("/v1/tasks", `{"host":"web-1","diagnostic":"leak"}`)
	id, _ := posted["id"].(string)
	if code != http.StatusAccepted || id == "" {
		t.Fatalf("POST /v1/tasks: %d %v", code, posted)
	}
	eventually(t, 30*time.Second, "the failed event delivered", func() bool { return len(hook.of("failed")) == 1 })
	r := hook.of("failed")[0]
	if !notify.Verify([]byte(webhookSecret), r.body, r.signature) {
		t.Error("signature does not verify")
	}
	assertRedacted(t, "webhook body", string(r.body))

	cfgPath := sqsWriteConfig(t, yaml)
	code, stdout, stderr := runCLI(t, nil, "show", id, "--config", cfgPath, "--admin-addr", a.Addr(), "--json")
	if code != 0 {
		t.Fatalf("show --json: exit %d: %s", code, stderr)
	}
	var v taskview.Task
	if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.ID != id || v.Outcome != "failed" {
		t.Fatalf("show --json = %s (%v), want %s failed", stdout, err, id)
	}
	if hostname, _ := os.Hostname(); v.RanOn == nil || v.RanOn.InstanceID != v.Owner || v.RanOn.Hostname != hostname {
		t.Errorf("show --json ran_on %+v, want the agent's instance id %q and hostname %q", v.RanOn, v.Owner, hostname)
	}
	assertRedacted(t, "show --json", v.Output)
	if code, _, _ := runCLI(t, nil, "show", "nope", "--config", cfgPath, "--admin-addr", a.Addr()); code != 1 {
		t.Errorf("show of an unknown task: exit %d, want 1", code)
	}
	assertNotFound(t, a, "/v1/tasks/nope")
	code, stdout, _ = runCLI(t, nil, "status", "--config", cfgPath, "--admin-addr", a.Addr())
	if code != 0 || !strings.Contains(stdout, id) {
		t.Errorf("status: exit %d, want the task id %s listed:\n%s", code, id, stdout)
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after the drain, want 0", code)
	}
}

func assertNotFound(t *testing.T, a *proc, path string) {
	t.Helper()
	resp, err := a.get(path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != http.StatusNotFound || e["reason"] != "not_found" || e["error"] == "" {
		t.Errorf("GET %s: %d %v, want 404 with error and reason not_found", path, resp.StatusCode, e)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A 400 gives the event up at once; `autodiag notify dead` lists it and
// --requeue puts it back, to be delivered with its delivery id.
func TestNotifyDeadRequeue(t *testing.T) {
	_, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	hook := newHookReceiverCode(t, 1, http.StatusBadRequest)
	cfg := sqsAgentConfig{instance: "agent-d", workers: 1, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: prefix}
	yaml := cfg.yaml() + notifyYAML(hook.srv.URL, "succeeded")
	env := append([]string{"E2E_WEBHOOK_SECRET=" + webhookSecret}, fq.env...)
	a := startProc(t, yaml, env...)
	fq.send(t, sqsTaskBody("ok-1", "noop"))
	eventually(t, 30*time.Second, "the succeeded event refused", func() bool { return len(hook.of("succeeded")) == 1 })
	cfgPath := sqsWriteConfig(t, yaml)
	var stdout string
	eventually(t, 10*time.Second, "the event in the dead list", func() bool {
		_, stdout, _ = runCLI(t, nil, "notify", "dead", "--config", cfgPath)
		return strings.Contains(stdout, "status_400")
	})
	first := hook.of("succeeded")[0].delivery
	if !strings.Contains(stdout, first) || !strings.Contains(stdout, "hook") {
		t.Errorf("notify dead = %q, want delivery %s of sink hook", stdout, first)
	}
	code, stdout, stderr := runCLI(t, nil, "notify", "dead", "--requeue", "--config", cfgPath)
	if code != 0 || !strings.Contains(stdout, "requeued 1") {
		t.Fatalf("notify dead --requeue: exit %d %q %s", code, stdout, stderr)
	}
	eventually(t, 30*time.Second, "the requeued event delivered", func() bool { return len(hook.of("succeeded")) == 2 })
	if again := hook.of("succeeded")[1].delivery; again != first {
		t.Errorf("requeued delivery id %s, want %s", again, first)
	}
	if _, stdout, _ := runCLI(t, nil, "notify", "dead", "--config", cfgPath); strings.TrimSpace(stdout) != "" {
		t.Errorf("dead list after the requeue: %q, want empty", stdout)
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after the drain, want 0", code)
	}
}
