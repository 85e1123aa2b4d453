package agent

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/outcome"
)

// TestStatusDrainCountsAndDeadline: the drain block says how many tasks
// are left and how many seconds remain, under names that cannot be read
// as each other; remaining stays as the deprecated alias of the count.
func TestStatusDrainCountsAndDeadline(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	if code, _ := ta.post(t, `{"id":"long-1","host":"web-01.example.com","diagnostic":"sleep","params":{"secs":"30"}}`); code != http.StatusAccepted {
		t.Fatalf("POST = %d", code)
	}
	waitFor(t, "running", func() bool { return ta.Status().Inflight == 1 })
	ta.Drain("test", "status fields")
	_, body := ta.get(t, "/v1/status")
	var s struct {
		Drain map[string]any `json:"drain"`
	}
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	if s.Drain["remaining_tasks"] != 1.0 || s.Drain["remaining"] != 1.0 {
		t.Fatalf("remaining_tasks, remaining = %v, %v; want 1 task: %s", s.Drain["remaining_tasks"], s.Drain["remaining"], body)
	}
	left, ok := s.Drain["deadline_in_seconds"].(float64)
	budget := ta.cfg.Drain.Timeout.Seconds()
	// The drain began within waitFor's own bound before the GET.
	if !ok || left > budget || left < budget-20 {
		t.Fatalf("deadline_in_seconds = %v; want a number within 20 s below drain_timeout %g: %s", s.Drain["deadline_in_seconds"], budget, body)
	}
}

// TestPostStaleCountedStale: a POSTed task older than queue.max_age ends
// as stale, as the same task from the queue does, not as rejected.
func TestPostStaleCountedStale(t *testing.T) {
	t.Parallel()
	ta := startAgent(t, testConfig)
	old := time.Now().Add(-ta.cfg.Queue.MaxAge - time.Hour).UTC().Format(time.RFC3339)
	code, out := ta.post(t, `{"host":"web-01.example.com","diagnostic":"echo","created_at":"`+old+`"}`)
	if code != http.StatusBadRequest || out["reason"] != "stale" {
		t.Fatalf("POST stale = %d %v; want 400 stale", code, out)
	}
	if st, rej := ta.outcome(outcome.Stale), ta.outcome(outcome.Rejected); st != 1 || rej != 0 {
		t.Fatalf("stale = %d, rejected = %d; want 1, 0", st, rej)
	}
}

// TestAllowIPLiteralsReachesValidator: limiter.hosts.allow_ip_literals is
// what the agent's validator applies; the instance metadata address stays
// rejected either way.
func TestAllowIPLiteralsReachesValidator(t *testing.T) {
	t.Parallel()
	for _, optIn := range []bool{false, true} {
		cfg := strings.Replace(testConfig, "    allow: ['^[a-z0-9-]+(\\.[a-z0-9-]+)*\\.example\\.com$']",
			"    allow: ['^[0-9.]+$']\n    allow_ip_literals: "+map[bool]string{false: "false", true: "true"}[optIn], 1)
		if cfg == testConfig {
			t.Fatal("testConfig's allow-list moved; update this test")
		}
		ta := startAgent(t, cfg)
		code, out := ta.post(t, `{"host":"10.1.2.3","diagnostic":"echo"}`)
		if optIn && code != http.StatusAccepted || !optIn && (code != http.StatusBadRequest || out["reason"] != "ip_literal_not_allowed") {
			t.Errorf("allow_ip_literals=%v: POST 10.1.2.3 = %d %v", optIn, code, out)
		}
		if code, out := ta.post(t, `{"host":"169.254.169.254","diagnostic":"echo"}`); code != http.StatusBadRequest {
			t.Errorf("allow_ip_literals=%v: POST 169.254.169.254 = %d %v; want 400", optIn, code, out)
		}
	}
}
