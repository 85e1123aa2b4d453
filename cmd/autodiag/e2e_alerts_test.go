package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/harness"
)

// The alert end-to-end tests: the real binary with its alert listener on
// loopback, the SQS fake as the task queue and the test Redis for state
// and the limiter (dedupe on alert.event_id, the default).

const intakeTokenEnv = "AUTODIAG_INTAKE_TOKEN"

// newAlertLedger writes the diagnostic script of the alert catalog, run as
// /bin/sh SCRIPT NAME HOST: it appends "NAME HOST" to the ledger; the
// diagnostic named gate then waits for the gate file.
func newAlertLedger(tb testing.TB) *sqsLedger {
	tb.Helper()
	return newLedger(tb, "diag.sh", `#!/bin/sh
printf '%%s %%s\n' "$1" "$2" >> '%[1]s'
if [ "$1" = gate ]; then while [ ! -e '%[2]s' ]; do /bin/sleep 0.02; done; fi
`)
}

// alertAgentYAML is an agent on the fake queue with the alert listener on loopback
// (bearer token required), the routes the golden fixtures use, and a
// catalog of the routes' diagnostics that write to the ledger.
func alertAgentYAML(tb testing.TB, queueURL, redisAddr, prefix string, l *sqsLedger) string {
	tb.Helper()
	routes, err := os.ReadFile(filepath.Join("..", "..", "agent", "alert", "testdata", "routes.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "instance_id: alerts-a\nadmin_addr: 127.0.0.1:0\nworkers: 4\n")
	fmt.Fprintf(&b, "queue:\n  url: '%s'\n  wait_time: 1s\n  visibility_timeout: 5s\n", queueURL)
	fmt.Fprintf(&b, "redis:\n  url: 'redis://%s/0'\n  prefix: '%s'\n  timeout: 2s\n", redisAddr, prefix)
	fmt.Fprintf(&b, "intake:\n  addr: 127.0.0.1:0\n  auth: {bearer_token_env: %s}\n", intakeTokenEnv)
	b.WriteString("diagnostics:\n")
	for _, d := range []string{"uptime", "memory", "gate"} {
		fmt.Fprintf(&b, "  - name: %s\n    command: [/bin/sh, '%s', %s, '{host}']\n    timeout: 60s\n", d, l.Script, d)
	}
	fmt.Fprintf(&b, "  - name: disk-usage\n    command: [/bin/sh, '%s', disk-usage, '{host}', '{param.mount}']\n"+
		"    params: {mount: '/[A-Za-z0-9/_.-]*'}\n    timeout: 60s\n", l.Script)
	b.WriteString("limiter:\n  hosts:\n    allow: ['^[a-z0-9-]+(\\.[a-z0-9-]+)*$']\n  rules: []\n")
	b.WriteString("routes:\n")
	for _, line := range strings.Split(string(routes), "\n") {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	return b.String()
}

// listenerAddr is the address of the agent's alert listener, from its
// "alert listener listening" line (logged before "ready").
func listenerAddr(t *testing.T, p *proc) string {
	t.Helper()
	ls := p.logs("alert listener listening")
	if len(ls) == 0 {
		t.Fatal("no alert listener listening line")
	}
	return ls[0]["addr"].(string)
}

// postAlert posts body to the alert listener; token "" sends no Authorization.
func postAlert(t *testing.T, addr, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&sb)
	return resp.StatusCode, sb.String()
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "agent", "alert", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// alertsTotal is autodiag_alerts_total{source,result} from /metrics.
func alertsTotal(p *proc, source, result string) float64 {
	return sqsMetric(p, fmt.Sprintf(`autodiag_alerts_total{result=%q,source=%q}`, result, source))
}

// TestE2EAlerts: an Alertmanager payload posted to the alert listener runs the
// tasks its routes make and not the resolved alert's; the same payload
// again inside the dedupe ttl runs nothing more; a CloudWatch alarm in an
// SNS envelope on the task queue runs its route and an OK one is ignored;
// no token is 401 with nothing enqueued; a draining agent answers 503.
func TestE2EAlerts(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "alerts")
	l := newAlertLedger(t)
	const token = "s3cret-intake-token"
	redisAddr := rc.Options().Addr
	p := startProc(t, alertAgentYAML(t, fq.url, redisAddr, prefix, l),
		append(fq.env, intakeTokenEnv+"="+token)...)
	addr := listenerAddr(t, p)
	const wait = 30 * time.Second

	am := fixture(t, "alertmanager_v4.json")
	t.Run("no token is 401 and nothing is enqueued", func(t *testing.T) {
		code, body := postAlert(t, addr, "/v1/alerts/alertmanager", "", am)
		if code != http.StatusUnauthorized {
			t.Fatalf("code = %d %s, want 401", code, body)
		}
		code, _ = postAlert(t, addr, "/v1/alerts/alertmanager", "wrong", am)
		if code != http.StatusUnauthorized {
			t.Fatalf("wrong token: code = %d, want 401", code)
		}
		if _, _, _, st := fq.stats(t); st.Sent != 0 {
			t.Fatalf("queue got %d messages from unauthorised posts", st.Sent)
		}
	})

	want := map[string]int{"disk-usage web-01.prod.example.com": 1, "uptime web-03.prod.example.com": 1, "memory web-03.prod.example.com": 1}
	t.Run("grouped payload runs its routes, not the resolved alert", func(t *testing.T) {
		code, body := postAlert(t, addr, "/v1/alerts/alertmanager", token, am)
		if code != http.StatusOK || !strings.Contains(body, `"accepted":2`) || !strings.Contains(body, `"reason":"resolved"`) {
			t.Fatalf("answer %d %s", code, body)
		}
		eventually(t, wait, "the three tasks to run", func() bool { return sqsOutcomes(p)["succeeded"] == 3 })
		if got := l.counts(t); !mapsEqual(got, want) {
			t.Fatalf("runs = %v, want %v (web-02's alert is resolved)", got, want)
		}
		if _, _, _, st := fq.stats(t); st.Sent != 3 {
			t.Fatalf("queue got %d messages, want 3 tasks", st.Sent)
		}
		if n := alertsTotal(p, "alertmanager", "accepted"); n != 2 {
			t.Fatalf("alerts accepted = %v, want 2", n)
		}
	})

	t.Run("the same payload inside the dedupe ttl runs once", func(t *testing.T) {
		code, body := postAlert(t, addr, "/v1/alerts/alertmanager", token, am)
		if code != http.StatusOK {
			t.Fatalf("answer %d %s", code, body)
		}
		eventually(t, wait, "the repeats to end as duplicates", func() bool { return sqsOutcomes(p)["duplicate"] == 3 })
		if got := l.counts(t); !mapsEqual(got, want) {
			t.Fatalf("runs = %v, want still %v", got, want)
		}
	})

	t.Run("a CloudWatch alarm through SNS on the task queue runs its route", func(t *testing.T) {
		fq.send(t, fixture(t, "sns_cloudwatch_alarm.json"), fixture(t, "sns_cloudwatch_ok.json"))
		eventually(t, wait, "the alarm's task to run", func() bool { return l.counts(t)["uptime i-0abc123def4567890"] == 1 })
		eventually(t, wait, "both envelopes counted", func() bool {
			return alertsTotal(p, "cloudwatch", "accepted") == 1 && alertsTotal(p, "cloudwatch", "ignored") == 1
		})
		eventually(t, wait, "the queue to empty", func() bool { return fq.drained(t) })
		if o := sqsOutcomes(p); o["rejected"] != 0 {
			t.Fatalf("outcomes %v: an alarm envelope ended as a task", o)
		}
	})

	t.Run("a draining agent answers 503", func(t *testing.T) {
		fq.send(t, `{"id":"hold","host":"web-1","diagnostic":"gate"}`)
		eventually(t, wait, "the gate task to start", func() bool { return l.counts(t)["gate web-1"] == 1 })
		if code, _ := p.post("/v1/drain", ""); code != http.StatusAccepted {
			t.Fatalf("drain: %d", code)
		}
		code, body := postAlert(t, addr, "/v1/alerts/alertmanager", token, am)
		if code != http.StatusServiceUnavailable {
			t.Fatalf("while draining: %d %s, want 503", code, body)
		}
		resp, err := httpDo(t, http.MethodGet, "http://"+addr+"/readyz", "")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("readyz while draining: %d", resp.StatusCode)
		}
		l.open()
		// A drain asked for over HTTP leaves the instance: exit 75, restarted.
		if code := p.wait(wait); code != exitDrained {
			t.Fatalf("exit %d, want %d", code, exitDrained)
		}
		if _, err := httpDo(t, http.MethodGet, "http://"+addr+"/readyz", ""); err == nil {
			t.Fatal("alert listener still listening after exit")
		}
	})
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestE2EListenerRefusesOpen: an alert listener reachable from other hosts
// without auth, or whose token variable is unset, does not start (exit 2,
// saying why).
func TestE2EListenerRefusesOpen(t *testing.T) {
	for _, tc := range []struct{ name, intake, want string }{
		{"off loopback without auth", "intake: {addr: '0.0.0.0:0'}\n", "reachable from other hosts"},
		{"token variable unset", "intake: {addr: '127.0.0.1:0', auth: {bearer_token_env: AUTODIAG_TEST_UNSET_TOKEN}}\n", "AUTODIAG_TEST_UNSET_TOKEN is unset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sqsWriteConfig(t, "admin_addr: 127.0.0.1:0\n"+tc.intake)
			code, _, stderr := runCLI(t, nil, "run", "--config", cfg)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 saying %q", code, stderr, tc.want)
			}
		})
	}
}

// TestE2ERoutesTest: `routes test` prints each alert's route and tasks,
// or why it makes none.
func TestE2ERoutesTest(t *testing.T) {
	l := newAlertLedger(t)
	cfg := sqsWriteConfig(t, strings.Replace(alertAgentYAML(t, "https://sqs.us-east-1.amazonaws.com/1/q", "127.0.0.1:1", "x:", l),
		"intake:\n  addr: 127.0.0.1:0\n", "intake:\n", 1))
	code, stdout, stderr := runCLI(t, nil, "routes", "test", "--config", cfg, "--source", "alertmanager",
		filepath.Join("..", "..", "agent", "alert", "testdata", "alertmanager_v4.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"disk-full", "disk-usage host=web-01.prod.example.com mount=/var",
		"resolved", "high-load", "uptime host=web-03.prod.example.com; memory host=web-03.prod.example.com",
		"truncated",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	code, _, stderr = runCLI(t, nil, "routes", "test", "--config", cfg, "--source", "nagios",
		filepath.Join("..", "..", "agent", "alert", "testdata", "alertmanager_v4.json"))
	if code != 2 {
		t.Fatalf("unknown source: exit %d %s, want 2", code, stderr)
	}
}

// TestE2EStandaloneListener: `autodiag intake` routes a payload onto the
// fleet's queue with no workers of its own, answers 503 after a signal and
// exits 0.
func TestE2EStandaloneListener(t *testing.T) {
	// Parallel: it waits on the listener's start and stop, on its own queue.
	t.Parallel()
	fq := newSQSFake(t, "central")
	const token = "central-token"
	in := startStandaloneListener(t, fq, token)
	addr := in.addrs["alert listener listening"]
	code, body := postAlert(t, addr, "/v1/alerts/alertmanager", token, fixture(t, "alertmanager_v4.json"))
	if code != http.StatusOK || !strings.Contains(body, `"accepted":2`) {
		t.Fatalf("answer %d %s", code, body)
	}
	if v, _, _, st := fq.stats(t); st.Sent != 3 || v != 3 {
		t.Fatalf("queue: sent %d, visible %d; want the 3 tasks waiting for the fleet", st.Sent, v)
	}
	if err := in.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, standaloneDrainGrace, "the alert listener to answer 503", func() bool {
		c, _ := postAlert(t, addr, "/v1/alerts/alertmanager", token, "{}")
		return c == http.StatusServiceUnavailable
	})
	<-in.Done()
	if err := in.Err(); err != nil {
		t.Fatalf("standalone listener exit: %v", err)
	}
}

// standaloneListener is an `autodiag intake` process and the addresses of its
// listeners, by log message ("admin listening", "alert listener listening").
type standaloneListener struct {
	*harness.Agent
	addrs map[string]string
}

// startStandaloneListener starts `autodiag intake` on fq with bearer token
// and returns once both its listeners are up.
func startStandaloneListener(t *testing.T, fq *sqsFake, token string) standaloneListener {
	t.Helper()
	l := newAlertLedger(t)
	a, err := harness.SpawnAgent(harness.AgentSpec{Bin: binPath, Command: "intake", Dir: t.TempDir(),
		Config: alertAgentYAML(t, fq.url, "127.0.0.1:1", "x:", l), Env: append(fq.env, intakeTokenEnv+"="+token)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.KillTree)
	in := standaloneListener{Agent: a, addrs: map[string]string{}}
	listening := func() bool {
		for _, msg := range []string{"admin listening", "alert listener listening"} {
			if l := a.Logs(msg); len(l) > 0 {
				in.addrs[msg], _ = l[0]["addr"].(string)
			}
		}
		return len(in.addrs) == 2 || !a.Alive()
	}
	if !harness.Until(30*time.Second, listening) {
		t.Fatal("alert listener not listening after 30s")
	}
	if len(in.addrs) < 2 {
		t.Fatalf("standalone listener exited before listening:\n%s", a.Output())
	}
	return in
}
