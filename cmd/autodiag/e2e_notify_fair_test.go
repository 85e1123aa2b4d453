package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/internal/testenv"
)

// countingReceiver records the requests and the delivery ids (webhooks
// carry one; Slack messages do not) it answered 200 to; with hang, it
// answers nothing until the request is cut.
type countingReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	ids  map[string]int
	n    int
	hang bool
}

func newCountingReceiver(t *testing.T, hang bool) *countingReceiver {
	c := &countingReceiver{ids: map[string]int{}, hang: hang}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if c.hang {
			<-r.Context().Done()
			return
		}
		c.mu.Lock()
		c.ids[r.Header.Get(notify.HeaderDelivery)]++
		c.n++
		c.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *countingReceiver) requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *countingReceiver) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

const fairTasks = 50

// A webhook that never answers (10 s sink timeout) beside a healthy
// Slack, four delivery workers, fifty tasks: Slack receives all fifty
// within 20 s, and the webhook's entries are retried by their own
// budget, never costing Slack an entry.
func TestNotifyHangingWebhookDoesNotStarveSlack(t *testing.T) {
	// Parallel: it waits out the webhook's 10 s timeout, on its own queue, sinks
	// and Redis prefix.
	t.Parallel()
	_, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	hook := newCountingReceiver(t, true)
	slack := newCountingReceiver(t, false)
	cfg := sqsAgentConfig{instance: "agent-fair", workers: 8, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: prefix}
	events := "[succeeded, failed, timed_out, rate_limited]"
	yaml := cfg.yaml() + fmt.Sprintf("notify:\n"+
		"  - name: hook\n    type: webhook\n    url: '%s/hook'\n    allow_http: true\n    timeout: 10s\n    on: %s\n"+
		"  - name: slack\n    type: slack\n    url_env: E2E_SLACK_URL\n    allow_http: true\n    on: %s\n",
		hook.srv.URL, events, events)
	env := append([]string{"E2E_SLACK_URL=" + slack.srv.URL + "/services/T/B/X"}, fq.env...)
	a := startProc(t, yaml, env...)
	var bodies []string
	for i := range fairTasks {
		bodies = append(bodies, fmt.Sprintf(`{"id":"fair-%d","host":"web-%d","diagnostic":"noop"}`, i, i))
	}
	start := time.Now()
	fq.send(t, bodies...)
	eventually(t, 20*time.Second, "Slack received every task's notification", func() bool { return slack.requests() >= fairTasks })
	t.Logf("Slack had all %d notifications %.1fs after the tasks were sent, the webhook hanging", fairTasks, time.Since(start).Seconds())
	eventually(t, 15*time.Second, "the webhook's entries retried", func() bool {
		return metricSum(a, "autodiag_notifications_total", `sink="hook"`, `result="retry"`) > 0
	})
	if got := metricSum(a, "autodiag_notifications_total", `sink="slack"`, `result="delivered"`); got != fairTasks {
		t.Errorf("%v Slack notifications delivered, want %d", got, fairTasks)
	}
	if dead := metricSum(a, "autodiag_notifications_total", `sink="slack"`, `result="dead"`); dead != 0 {
		t.Errorf("%v Slack notifications given up, want 0", dead)
	}
	if retry := metricSum(a, "autodiag_notifications_total", `sink="slack"`, `result="retry"`); retry != 0 {
		t.Errorf("%v Slack retries, want 0: Slack never failed", retry)
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after the drain, want 0", code)
	}
}

// The outbox filled past its cap while no agent ran: every entry written ends delivered
// or in the dead list with outbox_full, checked by delivery id; none is
// dropped without a trace.
func TestNotifyOutboxCapLosesNothingSilently(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	hook := newCountingReceiver(t, false)
	const outboxMax = 10
	const tasks = 25
	cfg := sqsAgentConfig{instance: "agent-cap", workers: 8, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: prefix}
	yaml := cfg.yaml() + fmt.Sprintf("notify_outbox_max: %d\nnotify:\n"+
		"  - name: hook\n    type: webhook\n    url: '%s/hook'\n    allow_http: true\n    on: [succeeded, failed, timed_out, rate_limited]\n",
		outboxMax, hook.srv.URL)
	env := fq.env
	// Entries written to the sink's stream before any agent runs, as a
	// fleet whose agents were all down would leave them: past the cap.
	ctx := context.Background()
	ob := notify.NewRedisOutbox(rc, notify.RedisOptions{Prefix: prefix})
	var written []string
	for i := range tasks {
		id := fmt.Sprintf("cap-%02d", i)
		written = append(written, id)
		if _, err := ob.Enqueue(ctx, []notify.Entry{{ID: id, Sink: "hook", Event: notify.EventSucceeded, Origin: "e2e",
			Time: time.Now(), Body: []byte(`{"event":"succeeded","delivery_id":"` + id + `"}`)}}); err != nil {
			t.Fatal(err)
		}
	}
	a := startProc(t, yaml, env...)
	eventually(t, 30*time.Second, "every entry delivered or dead-lettered", func() bool {
		dead, _ := ob.ListDead(ctx, 100)
		return hook.distinct()+len(dead) >= tasks
	})
	dead, err := ob.ListDead(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	deadIDs := map[string]string{}
	for _, e := range dead {
		deadIDs[e.ID] = e.Reason
	}
	lost := 0
	for _, id := range written {
		hook.mu.Lock()
		delivered := hook.ids[id] > 0
		hook.mu.Unlock()
		reason, died := deadIDs[id]
		switch {
		case !delivered && !died:
			lost++
			t.Errorf("entry %s neither delivered nor dead-lettered", id)
		case died && reason != notify.ReasonOutboxFull:
			t.Errorf("entry %s dead with %q, want %s", id, reason, notify.ReasonOutboxFull)
		}
	}
	if len(dead) != tasks-outboxMax {
		t.Errorf("%d entries dead-lettered, want the %d past the cap of %d", len(dead), tasks-outboxMax, outboxMax)
	}
	if got := metricSum(a, "autodiag_notifications_dropped_total", `sink="hook"`, `reason="outbox_full"`); got != float64(len(dead)) {
		t.Errorf("autodiag_notifications_dropped_total = %v, want %d", got, len(dead))
	}
	if lines := a.logsWhere("reason", notify.ReasonOutboxFull); len(lines) == 0 {
		t.Error("no log line for the dropped entries")
	}
	t.Logf("%d written past a cap of %d: %d delivered, %d dead-lettered with outbox_full, %d dropped without a trace",
		tasks, outboxMax, hook.distinct(), len(dead), lost)
	if n, _ := rc.XLen(ctx, prefix+"{notify}:outbox:hook").Result(); n != 0 {
		t.Errorf("outbox still holds %d entries", n)
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit %d after the drain, want 0", code)
	}
}
