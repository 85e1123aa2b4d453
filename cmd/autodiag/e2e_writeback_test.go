package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/fake/openaifake"
	"github.com/autodiag/autodiag/internal/fake/writebackfake"
	"github.com/autodiag/autodiag/internal/harness"
)

// writeBackYAML is an agent on the fake queue with the alert listener on loopback,
// the golden fixtures' routes, a catalog whose diagnostics print a secret
// among their output, and two sinks: a Slack bot on the stand-in's
// channel and Zabbix 7.0 (version asked with apiinfo.version).
func writeBackYAML(tb testing.TB, queueURL, redisAddr, prefix, script, slackURL, zabbixURL, on string) string {
	tb.Helper()
	routes, err := os.ReadFile(filepath.Join("..", "..", "agent", "alert", "testdata", "routes.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "instance_id: writeback-a\nadmin_addr: 127.0.0.1:0\nworkers: 4\n")
	fmt.Fprintf(&b, "queue:\n  url: '%s'\n  wait_time: 1s\n  visibility_timeout: 5s\n", queueURL)
	fmt.Fprintf(&b, "redis:\n  url: 'redis://%s/0'\n  prefix: '%s'\n  timeout: 2s\n", redisAddr, prefix)
	fmt.Fprintf(&b, "intake:\n  addr: 127.0.0.1:0\n  auth: {bearer_token_env: %s}\n", intakeTokenEnv)
	b.WriteString("diagnostics:\n")
	for _, d := range []string{"uptime", "memory"} {
		fmt.Fprintf(&b, "  - name: %s\n    command: [/bin/sh, '%s', %s, '{host}']\n    timeout: 60s\n", d, script, d)
	}
	fmt.Fprintf(&b, "  - name: disk-usage\n    command: [/bin/sh, '%s', disk-usage, '{host}', '{param.mount}']\n"+
		"    params: {mount: '/[A-Za-z0-9/_.-]*'}\n    timeout: 60s\n", script)
	b.WriteString("limiter:\n  hosts:\n    allow: ['^[a-z0-9-]+(\\.[a-z0-9-]+)*$']\n  rules: []\n")
	fmt.Fprintf(&b, `notify:
  - name: oncall
    type: slack
    url: '%[1]s'
    allow_http: true
    bot_token_env: SLACK_BOT_TOKEN
    channel: C0AUTODIAG
    on: [%[3]s]
  - name: zabbix
    type: zabbix
    url: '%[2]s/api_jsonrpc.php'
    allow_http: true
    token_env: ZABBIX_API_TOKEN
    on: [%[3]s]
`, slackURL, zabbixURL, on)
	b.WriteString("routes:\n")
	for _, line := range strings.Split(string(routes), "\n") {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	return b.String()
}

// TestE2EWriteBack: a real Alertmanager 0.25 payload (two firing HighLoad
// alerts, one resolved) and a Zabbix media-type problem go through the
// alert listener, their tasks run, and the results are written back: to Slack,
// one thread per alert with the alert's later results under its first
// message; to Zabbix, one acknowledgement on the problem's event carrying
// the task id and delivery mark, within Zabbix's limit. The secret the
// diagnostics print reaches neither.
func TestE2EWriteBack(t *testing.T) {
	const (
		secret     = "hunter2hunter2hunter2"
		slackToken = "xoxb-1111-2222-e2etoken"
		zbxToken   = "zbx-e2e-token-0123456789abcdef"
		token      = "s3cret-intake-token"
	)
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "writeback")
	l := newLedger(t, "diag.sh", `#!/bin/sh
printf '%%s %%s\n' "$1" "$2" >> '%[1]s'
echo "$1 on $2: load average: 9.12, 8.40, 7.95"
echo "DB_PASSWORD=`+secret+`"
# gate (unused): %[2]s
`)
	slack := writebackfake.NewSlack(t, slackToken, "C0AUTODIAG")
	zbx := writebackfake.NewZabbix(t, "7.0.5", zbxToken, "81237")
	p := startProc(t, writeBackYAML(t, fq.url, rc.Options().Addr, prefix, l.Script, slack.URL, zbx.URL, "succeeded, failed"),
		append(fq.env, intakeTokenEnv+"="+token, "SLACK_BOT_TOKEN="+slackToken, "ZABBIX_API_TOKEN="+zbxToken)...)
	addr := listenerAddr(t, p)
	const wait = 30 * time.Second

	am, err := os.ReadFile(filepath.Join("testdata", "alertmanager-0.25-highload.json"))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := postAlert(t, addr, "/v1/alerts/alertmanager", token, string(am)); code != http.StatusOK {
		t.Fatalf("alertmanager payload: %d %s", code, body)
	}
	if code, body := postAlert(t, addr, "/v1/alerts/zabbix", token, fixture(t, "zabbix6_problem.json")); code != http.StatusOK {
		t.Fatalf("zabbix payload: %d %s", code, body)
	}
	// Two alerts × (uptime, memory), and the Zabbix problem's disk-usage.
	eventually(t, wait, "the five tasks to run", func() bool { return sqsOutcomes(p)["succeeded"] == 5 })
	eventually(t, wait, "five Slack messages", func() bool { return len(slack.Messages()) == 5 })
	eventually(t, wait, "the Zabbix acknowledgement", func() bool { return len(zbx.Acks("81237")) == 1 })

	t.Run("slack: one thread per alert", func(t *testing.T) {
		roots := map[string]string{} // ts → host
		for _, m := range slack.Messages() {
			if m.ThreadTS == "" {
				roots[m.TS] = hostOf(m.Text)
			}
		}
		if len(roots) != 3 {
			t.Fatalf("%d first messages, want 3 (two HighLoad alerts, one Zabbix problem): %+v", len(roots), slack.Messages())
		}
		for _, m := range slack.Messages() {
			if m.ThreadTS == "" {
				continue
			}
			if host, ok := roots[m.ThreadTS]; !ok || host != hostOf(m.Text) {
				t.Errorf("reply %q under %s, the thread of %q", m.Text, m.ThreadTS, host)
			}
		}
	})

	t.Run("zabbix: one acknowledgement, on the problem's event", func(t *testing.T) {
		ack := zbx.Acks("81237")[0]
		if ack.Action != 4 || len([]rune(ack.Message)) > writebackfake.ZabbixMessageMax ||
			!strings.Contains(ack.Message, "disk-usage on db-01.prod.example.com") ||
			!strings.Contains(ack.Message, "autodiag delivery ") || !strings.Contains(ack.Message, "[REDACTED:") {
			t.Fatalf("acknowledgement %+v", ack)
		}
		bearer := 0
		for _, c := range zbx.Calls() {
			if c.Header.Get("Authorization") == "Bearer "+zbxToken {
				bearer++
			}
		}
		if bearer == 0 {
			t.Fatal("no call carried the token as a bearer (Zabbix 7.0)")
		}
	})

	t.Run("the secret reaches neither", func(t *testing.T) {
		for _, calls := range [][]writebackfake.Call{slack.Calls(), zbx.Calls()} {
			for _, c := range calls {
				if strings.Contains(string(c.Body), secret) {
					t.Fatalf("%s %s carried the secret: %s", c.Method, c.Path, c.Body)
				}
			}
		}
	})
}

// hostOf is the host in a Slack message's text ("✅ succeeded: uptime on HOST").
func hostOf(text string) string {
	_, host, _ := strings.Cut(text, " on ")
	return host
}

// TestE2EResolution: a HighLoad alert fires (the firing form of the
// resolved alert in the real Alertmanager 0.25 payload: same fingerprint
// and startsAt), its tasks run and get reports; then the real payload,
// with that alert resolved, stamps resolved_at on both reports and the
// resolution metrics show them; sent again, it changes nothing. The
// resolution starts no task.
func TestE2EResolution(t *testing.T) {
	const token = "s3cret-intake-token"
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "resolution")
	l := newLedger(t, "diag.sh", `#!/bin/sh
printf '%%s %%s\n' "$1" "$2" >> '%[1]s'
echo "$1 on $2: load average: 9.12, 8.40, 7.95"
# gate (unused): %[2]s
`)
	fake := openaifake.New()
	t.Cleanup(fake.Close)
	slack := writebackfake.NewSlack(t, "xoxb-e2e", "C0AUTODIAG")
	zbx := writebackfake.NewZabbix(t, "7.0.5", "zbx-e2e")
	yaml := writeBackYAML(t, fq.url, rc.Options().Addr, prefix, l.Script, slack.URL, zbx.URL, "succeeded, report, resolved")
	yaml += fmt.Sprintf("report:\n  enabled: true\n  provider: openai\n  model: e2e-model\n  base_url: '%s'\n  api_key_env: %s\n"+
		"  on: [succeeded]\n  workers: 2\n", fake.BaseURL(), reportKeyEnv)
	p := startProc(t, yaml, append(fq.env, intakeTokenEnv+"="+token, reportKeyEnv+"="+reportKey,
		"SLACK_BOT_TOKEN=xoxb-e2e", "ZABBIX_API_TOKEN=zbx-e2e")...)
	addr := listenerAddr(t, p)
	const wait = 30 * time.Second

	real, err := os.ReadFile(filepath.Join("testdata", "alertmanager-0.25-highload.json"))
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal(real, &payload); err != nil {
		t.Fatal(err)
	}
	var resolvedAlert map[string]any
	for _, a := range payload["alerts"].([]any) {
		if a.(map[string]any)["status"] == "resolved" {
			resolvedAlert = a.(map[string]any)
		}
	}
	firing := map[string]any{}
	for k, v := range payload {
		firing[k] = v
	}
	fa := map[string]any{}
	for k, v := range resolvedAlert {
		fa[k] = v
	}
	fa["status"], fa["endsAt"] = "firing", "0001-01-01T00:00:00Z"
	firing["status"], firing["alerts"] = "firing", []any{fa}
	fb, _ := json.Marshal(firing)
	if code, body := postAlert(t, addr, "/v1/alerts/alertmanager", token, string(fb)); code != http.StatusOK {
		t.Fatalf("firing: %d %s", code, body)
	}
	const host = "web-07.example.com"
	var ids []string
	eventually(t, wait, "web-07's two tasks to end", func() bool {
		ids = ids[:0]
		for _, line := range p.logsWhere("msg", "task ended", "host", host) {
			if id, _ := line["task_id"].(string); id != "" {
				ids = append(ids, id)
			}
		}
		return len(ids) == 2
	})
	eventually(t, wait, "both reports", func() bool {
		for _, id := range ids {
			if _, ok := recordReport(t, rc, prefix, id); !ok {
				return false
			}
		}
		return true
	})

	for range 2 { // Alertmanager repeats a resolved notification
		if code, body := postAlert(t, addr, "/v1/alerts/alertmanager", token, string(real)); code != http.StatusOK {
			t.Fatalf("resolved: %d %s", code, body)
		}
	}
	var stamped []time.Time
	eventually(t, wait, "resolved_at on both reports", func() bool {
		stamped = stamped[:0]
		for _, id := range ids {
			r, _ := recordReport(t, rc, prefix, id)
			if r.ResolvedAt == nil {
				return false
			}
			stamped = append(stamped, *r.ResolvedAt)
		}
		return true
	})
	if got := sqsMetric(p, "autodiag_report_resolution_seconds_count"); got != 2 {
		t.Errorf("resolution_seconds count = %v, want 2 (one per report, the repeat not counted)", got)
	}
	for _, cat := range []string{"uptime", "memory"} {
		if got := harness.Series(p.metrics(), "autodiag_report_resolutions_total",
			fmt.Sprintf(`category=%q,confidence="likely",within_1h="true"`, cat)); got != 1 {
			t.Errorf("resolutions{%s,likely,true} = %v, want 1", cat, got)
		}
	}
	// The resolved alert makes no task on its host (the payload's two
	// firing alerts make theirs on web-05 and web-06).
	for _, line := range p.logsWhere("msg", "task ended", "host", host) {
		if id, _ := line["task_id"].(string); !slices.Contains(ids, id) {
			t.Fatalf("the resolution started task %s on %s", id, host)
		}
	}
	if !stamped[0].Equal(stamped[1]) {
		t.Errorf("the two reports' resolved_at differ: %v", stamped)
	}
	// report-stats counts both reports as resolved within 1 h.
	resp, err := p.get("/v1/reports/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Resolutions int `json:"resolutions"`
		Rows        []struct {
			Diagnostic string `json:"diagnostic"`
			Confidence string `json:"confidence"`
			Resolved   int    `json:"resolved"`
			Within1h   int    `json:"resolved_within_1h"`
		} `json:"rows"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Resolutions != 2 || len(st.Rows) != 2 {
		t.Fatalf("stats %+v %v, want two resolved reports", st, err)
	}
	for _, r := range st.Rows {
		if r.Confidence != "likely" || r.Resolved != 1 || r.Within1h != 1 {
			t.Errorf("stats row %+v, want 1 resolved within 1 h at likely", r)
		}
	}
	// Slack: web-07's thread ends with one "resolved" reply under its
	// first message; no Zabbix call (the alert names no Zabbix event).
	eventually(t, wait, "the resolved reply", func() bool {
		for _, m := range slack.Messages() {
			if strings.Contains(m.Text, "alert resolved") {
				return true
			}
		}
		return false
	})
	root, resolvedN := "", 0
	for _, m := range slack.Messages() {
		if hostOf(m.Text) != host {
			continue
		}
		if m.ThreadTS == "" {
			if root != "" {
				t.Fatalf("two threads for web-07: %+v", slack.Messages())
			}
			root = m.TS
		} else if m.ThreadTS != root {
			t.Fatalf("a web-07 reply outside its thread: %+v", m)
		}
		if strings.Contains(m.Text, "alert resolved") {
			resolvedN++
		}
	}
	if root == "" || resolvedN != 1 {
		t.Fatalf("web-07: thread %q, %d resolved replies; want one thread, one reply: %+v", root, resolvedN, slack.Messages())
	}
	if n := zbx.CallCount(); n != 0 {
		t.Fatalf("%d Zabbix calls for Alertmanager alerts without a zabbix_event_id", n)
	}
}
