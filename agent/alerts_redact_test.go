package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/task"
)

// leakySender fails with an error that quotes what it was given.
type leakySender struct{ secret string }

func (s leakySender) SendBatch(context.Context, []task.Task) error {
	return errors.New("queue refused the batch: DB_PASSWORD=" + s.secret)
}

// TestQueueAlarmLogRedacted: a CloudWatch alarm routed from the task
// queue is logged redacted, like the alert listener's alerts: here the error of a
// send that failed quotes a secret.
func TestQueueAlarmLogRedacted(t *testing.T) {
	const secret = "hunter22hunter22"
	alarm, err := os.ReadFile("alert/testdata/sns_cloudwatch_alarm.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]byte(alarmConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ma, stop := runMemAgent(t, cfg, Deps{InstanceID: "i-al", AlertSender: leakySender{secret},
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Registry: prometheus.NewRegistry()})
	defer stop()
	if _, err := ma.src.Send(t.Context(), alarm); err != nil {
		t.Fatal(err)
	}
	const msg = "alert tasks not queued; the alarm comes back to try again"
	waitFor(t, "the failed send to be logged", func() bool { return len(logs.lines(msg)) > 0 })
	l := logs.lines(msg)[0]
	if e, _ := l["err"].(string); !strings.Contains(e, "[REDACTED:") || l["message_id"] == nil {
		t.Fatalf("log line %v: want the error redacted, with message_id", l)
	}
	logs.mu.Lock()
	out := logs.b.String()
	logs.mu.Unlock()
	if strings.Contains(out, secret) {
		t.Fatalf("the log holds the secret:\n%s", out)
	}
}

// TestStandaloneListenerLogRedacted: `autodiag intake` (open.StandaloneListener) logs
// like the agent's alert listener, redacted: a refused payload's error quotes
// the value it refused, which the sender chose.
func TestStandaloneListenerLogRedacted(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "x")
	const secret = "hunter22hunter22"
	cfg, err := config.Load([]byte(`
queue: {url: 'http://127.0.0.1:1/000000000000/tasks'}
intake:
  addr: 127.0.0.1:0
  auth: {bearer_token_env: TOKEN}
diagnostics:
  - {name: uptime, command: [/bin/echo, "{host}"], timeout: 10s}
limiter: {hosts: {allow: ['^[a-z0-9-]+$']}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	getenv := func(k string) (string, bool) { return "tok", k == "TOKEN" }
	in, err := open.StandaloneListener(t.Context(), cfg, open.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"version":"DB_PASSWORD=` + secret + `","status":"firing","alerts":[]}`
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/alerts/alertmanager", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer tok")
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	in.Handler.ServeHTTP(rec, req)
	logs.mu.Lock()
	out := logs.b.String()
	logs.mu.Unlock()
	if !strings.Contains(out, "[REDACTED:") {
		t.Fatalf("no redacted line logged:\n%s", out)
	}
	if strings.Contains(out, secret) {
		t.Fatalf("the log holds the secret:\n%s", out)
	}
}
