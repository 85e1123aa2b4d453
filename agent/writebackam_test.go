package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/internal/fake/writebackfake"
)

// TestWriteBackNotesFromRealAlertmanagerPayload: the real Alertmanager
// 0.25 payload (cmd/autodiag/testdata, as captured in
// /work/shared/fixtures), its web-05 alert annotated with a PagerDuty
// incident key and an Opsgenie alias as an alerting rule would, goes
// through the agent's alert listener; the route's two tasks run, and each
// task's result arrives once as a note on the right PagerDuty incident
// (looked up by its key, From the configured user) and the right Opsgenie
// alert, redacted.
func TestWriteBackNotesFromRealAlertmanagerPayload(t *testing.T) {
	const (
		secret = "hunter2hunter2hunter2"
		pdTok  = "pd-token-0123456789"
		ogKey  = "og-key-0123456789"
		from   = "oncall@example.com"
	)
	pd := writebackfake.NewPagerDuty(t, pdTok, from, map[string]string{"PWEB05": "web-05-highload-key"})
	og := writebackfake.NewOpsgenie(t, ogKey, "web-05-highload")
	routes, err := os.ReadFile(filepath.Join("alert", "testdata", "routes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("workers: 2\nintake:\n  addr: 127.0.0.1:0\n  auth: {bearer_token_env: INTAKE_TOKEN}\ndiagnostics:\n")
	for _, d := range []string{"uptime", "memory"} {
		fmt.Fprintf(&b, "  - {name: %s, command: [/bin/sh, -c, 'echo \"$0 on $1: load average: 9.12\"; echo DB_PASSWORD=%s', %s, '{host}'], timeout: 10s}\n", d, secret, d)
	}
	b.WriteString("  - {name: disk-usage, command: [/bin/echo, '{param.mount}'], params: {mount: '/[A-Za-z0-9/_.-]*'}, timeout: 10s}\n")
	b.WriteString("limiter: {hosts: {allow: ['^[a-z0-9-]+(\\.[a-z0-9-]+)*$']}, rules: []}\n")
	fmt.Fprintf(&b, `notify:
  - {name: pagerduty, type: pagerduty, url: '%s', allow_http: true, token_env: PD_TOKEN, from: %s, on: [succeeded]}
  - {name: opsgenie, type: opsgenie, url: '%s', allow_http: true, token_env: OG_KEY, on: [succeeded]}
routes:
`, pd.URL, from, og.URL)
	for _, line := range strings.Split(string(routes), "\n") {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	cfg, err := config.Load([]byte(b.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PD_TOKEN": pdTok, "OG_KEY": ogKey, "INTAKE_TOKEN": "tok"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	ma, stop := runMemAgent(t, cfg, Deps{InstanceID: "i-wb", LookupEnv: getenv})
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	ih, err := ma.AlertHandler(getenv)
	if err != nil {
		t.Fatal(err)
	}

	raw, err := os.ReadFile(filepath.Join("..", "cmd", "autodiag", "testdata", "alertmanager-0.25-highload.json"))
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal(raw, &payload); err != nil {
		t.Fatal(err)
	}
	annotated := 0
	for _, a := range payload["alerts"].([]any) {
		al := a.(map[string]any)
		if al["status"] == "firing" && strings.HasPrefix(al["labels"].(map[string]any)["instance"].(string), "web-05.") {
			al["annotations"] = map[string]any{"pagerduty_incident_key": "web-05-highload-key", "opsgenie_alias": "web-05-highload"}
			annotated++
		}
	}
	if annotated != 1 {
		t.Fatalf("%d firing web-05 alerts in the payload, want 1", annotated)
	}
	body, _ := json.Marshal(payload)
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/alerts/alertmanager", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	ih.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("alert: %d %s", w.Code, w.Body)
	}
	// web-05's two tasks (uptime, memory) each make one note per target.
	deadline := time.Now().Add(20 * time.Second)
	for len(pd.Notes("PWEB05")) < 2 || len(og.Notes("web-05-highload")) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("notes within 20s: pagerduty %q, opsgenie %q; want 2 each", pd.Notes("PWEB05"), og.Notes("web-05-highload"))
		}
		time.Sleep(20 * time.Millisecond) // polls an observable condition, bounded by the deadline above
	}
	// Every task has ended and its event been handled: nothing more comes.
	stop()
	stopped = true
	for target, notes := range map[string][]string{"pagerduty": pd.Notes("PWEB05"), "opsgenie": og.Notes("web-05-highload")} {
		if len(notes) != 2 {
			t.Errorf("%s: %d notes, want 2 (one per task, once)", target, len(notes))
		}
		var diags []string
		for _, n := range notes {
			if strings.Contains(n, secret) {
				t.Errorf("%s note holds the secret: %q", target, n)
			}
			for _, d := range []string{"uptime", "memory"} {
				if strings.Contains(n, d+" on web-05.example.com") {
					diags = append(diags, d)
				}
			}
		}
		slices.Sort(diags)
		if !slices.Equal(diags, []string{"memory", "uptime"}) {
			t.Errorf("%s notes %q, want one of uptime's and one of memory's on web-05", target, notes)
		}
	}
}
