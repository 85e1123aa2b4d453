package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/internal/testenv"
)

// End-to-end tests of the notification outbox under faults: the agent
// holding a delivery killed, Redis restarted empty, a Slack sink that never
// answers during a lifecycle drain.

// faultRequest is one request a faultHook got and what became of it.
type faultRequest struct {
	event, delivery, signature string
	body                       []byte
	at                         time.Time // arrival
	status                     int       // what the hook answered; 0 = no answer (held until the client left)
	ended                      time.Time // answered, or the client gone
}

// faultHook is a webhook receiver whose answer to the i-th request (from 0)
// is answer(i): a status, or hold (no answer until the client gives up).
type faultHook struct {
	srv     *httptest.Server
	answer  func(i int, h http.Header) int
	release chan struct{} // closed at cleanup: held requests end
	mu      sync.Mutex
	reqs    []faultRequest
}

// hold is the answer that keeps a request open, unanswered.
const hold = 0

func newFaultHook(t *testing.T, answer func(i int, h http.Header) int) *faultHook {
	h := &faultHook{answer: answer, release: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		i := len(h.reqs)
		h.reqs = append(h.reqs, faultRequest{event: r.Header.Get(notify.HeaderEvent), delivery: r.Header.Get(notify.HeaderDelivery),
			signature: r.Header.Get(notify.HeaderSignature), body: body, at: time.Now()})
		h.mu.Unlock()
		code := h.answer(i, w.Header())
		if code == hold {
			select {
			case <-r.Context().Done():
			case <-h.release:
			}
			h.mu.Lock()
			h.reqs[i].ended = time.Now()
			h.mu.Unlock()
			// Returning would answer 200; the connection is dropped instead.
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(code)
		h.mu.Lock()
		h.reqs[i].status, h.reqs[i].ended = code, time.Now()
		h.mu.Unlock()
	}))
	// Cleanups run last-in first-out: held handlers end before Close
	// waits for them.
	t.Cleanup(h.srv.Close)
	t.Cleanup(func() { close(h.release) })
	return h
}

func (h *faultHook) all() []faultRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]faultRequest(nil), h.reqs...)
}

// of returns the requests carrying delivery id id.
func (h *faultHook) of(id string) []faultRequest {
	var out []faultRequest
	for _, r := range h.all() {
		if r.delivery == id {
			out = append(out, r)
		}
	}
	return out
}

// answered2xx returns the requests of id that got a 2xx answer.
func (h *faultHook) answered2xx(id string) []faultRequest {
	var out []faultRequest
	for _, r := range h.of(id) {
		if r.status >= 200 && r.status < 300 {
			out = append(out, r)
		}
	}
	return out
}

// faultNotifyYAML is a signed webhook sink for on, with its request timeout,
// and the outbox's claim idle time.
func faultNotifyYAML(url string, timeout, claimIdle time.Duration, on ...string) string {
	return fmt.Sprintf("notify:\n  - name: hook\n    type: webhook\n    url: '%s/hook'\n    allow_http: true\n"+
		"    secret_env: E2E_WEBHOOK_SECRET\n    timeout: %s\n    on: [%s]\nnotify_claim_idle: %s\n",
		url, timeout, strings.Join(on, ", "), claimIdle)
}

// outboxKey is the stream of sink hook under a redis.prefix (agent/notify's key
// layout, documented in the README).
func outboxKey(prefix string) string { return prefix + "{notify}:outbox:hook" }

// outboxGroup is the outbox's consumer group (README).
const outboxGroup = "autodiag"

// outboxPending returns the pending entries of the outbox's group.
func outboxPending(t *testing.T, rc *redis.Client, prefix string) []redis.XPendingExt {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	p, err := rc.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: outboxKey(prefix), Group: outboxGroup, Start: "-", End: "+", Count: 100}).Result()
	if err != nil {
		t.Fatalf("XPENDING of the outbox: %v", err)
	}
	return p
}

// outboxLen sums XLEN of the outbox's streams, one per sink (acknowledged
// entries are deleted).
func outboxLen(t *testing.T, rc *redis.Client, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	keys, err := rc.Keys(ctx, prefix+"{notify}:outbox:*").Result()
	if err != nil {
		t.Fatalf("outbox streams: %v", err)
	}
	var n int64
	for _, k := range keys {
		l, err := rc.XLen(ctx, k).Result()
		if err != nil {
			t.Fatalf("XLEN of the outbox: %v", err)
		}
		n += l
	}
	return n
}

// An agent killed with SIGKILL while its webhook request hangs leaves the
// entry pending under its name; another agent on the same Redis claims it
// once it has been idle for notify_claim_idle and delivers it, with the
// same delivery id and body, exactly once.
func TestNotifyTakeoverAfterKill9E2E(t *testing.T) {
	// Parallel: it waits out notify_claim_idle, on its own queue, webhook
	// and Redis prefix.
	t.Parallel()
	const (
		sinkTimeout = 3 * time.Second
		// The least notify_claim_idle the sink's timeout allows.
		claimIdle    = 2 * sinkTimeout
		redisTimeout = 2 * time.Second // sqsAgentConfig's redis.timeout
	)
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	// The first request (agent-a's) is held; every later one is answered.
	hook := newFaultHook(t, func(i int, _ http.Header) int {
		if i == 0 {
			return hold
		}
		return http.StatusOK
	})
	yaml := func(instance string) string {
		return sqsAgentConfig{instance: instance, workers: 1, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: prefix}.yaml() +
			faultNotifyYAML(hook.srv.URL, sinkTimeout, claimIdle, "succeeded")
	}
	env := append([]string{"E2E_WEBHOOK_SECRET=" + webhookSecret}, fq.env...)
	a := startProc(t, yaml("agent-a"), env...)
	fq.send(t, sqsTaskBody("k9-1", "noop"))
	eventually(t, 30*time.Second, "agent-a's request at the hook", func() bool { return len(hook.all()) >= 1 })
	first := hook.all()[0]
	if first.delivery == "" || first.event != "succeeded" {
		t.Fatalf("first request: event %q delivery %q, want succeeded with a delivery id", first.event, first.delivery)
	}

	// The entry is pending under agent-a while its request hangs. Redis
	// counts its idle time when it answers, after asked: the claim was no
	// earlier than asked - idle (whole ms), whatever the answer's delay.
	asked := time.Now()
	pend := outboxPending(t, rc, prefix)
	if len(pend) != 1 || pend[0].Consumer != "agent-a" {
		t.Fatalf("pending entries %+v, want one under agent-a", pend)
	}
	claimedAt := asked.Add(-pend[0].Idle)
	if n := len(hook.all()); n != 1 {
		t.Fatalf("%d requests while agent-a's first one hangs, want 1: the entry was claimed again before notify_claim_idle", n)
	}
	sqsKill9(a)
	killedAt := time.Now()
	eventually(t, 5*time.Second, "agent-a's request ended by its death", func() bool { return !hook.all()[0].ended.IsZero() })
	if st := hook.all()[0].status; st != hold {
		t.Fatalf("agent-a's request was answered %d; it must hang", st)
	}

	b := startProc(t, yaml("agent-b"), env...)
	bReady := time.Now()
	// agent-b claims once the entry has been idle for claimIdle, looking
	// every DefaultPollInterval; the delivery takes at most sinkTimeout.
	due := claimedAt.Add(claimIdle)
	if bReady.After(due) {
		due = bReady
	}
	bound := time.Until(due.Add(notify.DefaultPollInterval + sinkTimeout))
	eventually(t, bound+loadAllowance, "agent-b delivering the entry", func() bool { return len(hook.answered2xx(first.delivery)) == 1 })
	// Acknowledged (deleted) after the 2xx, in one call bounded by
	// redis.timeout: nothing is left to deliver again (a second delivery
	// would show in the requests counted below).
	eventually(t, redisTimeout+notify.DefaultPollInterval+loadAllowance, "the outbox empty", func() bool {
		return outboxLen(t, rc, prefix) == 0 && len(outboxPending(t, rc, prefix)) == 0
	})

	tries := hook.of(first.delivery)
	ok := hook.answered2xx(first.delivery)
	if len(tries) != 2 || len(ok) != 1 {
		t.Fatalf("%d requests (%d answered 2xx) with delivery %s, want agent-a's held one and agent-b's delivered one", len(tries), len(ok), first.delivery)
	}
	got := ok[0]
	if !got.at.After(killedAt) {
		t.Errorf("the delivery arrived %s before agent-a's death", killedAt.Sub(got.at))
	}
	if early := claimedAt.Add(claimIdle).Sub(got.at); early > time.Millisecond {
		t.Errorf("agent-b delivered %s before the entry was idle for notify_claim_idle %s", early, claimIdle)
	}
	if got.delivery != first.delivery || !bytes.Equal(got.body, first.body) || !notify.Verify([]byte(webhookSecret), got.body, got.signature) {
		t.Errorf("agent-b's request: delivery %q, body equal %v, signature verifies %v; want agent-a's delivery %q and body, signed",
			got.delivery, bytes.Equal(got.body, first.body), notify.Verify([]byte(webhookSecret), got.body, got.signature), first.delivery)
	}
	if n := labelledMetric(b, "autodiag_notifications_total", `event="succeeded",result="delivered",sink="hook"`); n != 1 {
		t.Errorf("agent-b counted %v deliveries, want 1", n)
	}
	t.Logf("REPORT takeover: agent-a claimed, killed %.3fs later; agent-b delivered %.3fs after the claim (notify_claim_idle %s)",
		killedAt.Sub(claimedAt).Seconds(), got.at.Sub(claimedAt).Seconds(), claimIdle)
	sqsDrainAll(t, b)
}

// Redis restarted empty under a running agent, with an entry waiting in
// the outbox to be retried: the agent does not exit, tasks keep flowing
// and their events are delivered, the outbox's stream and consumer group
// exist again, and the loss is counted once (autodiag_outbox_resets_total)
// and logged once at error.
func TestNotifyOutboxRedisRestartedEmptyE2E(t *testing.T) {
	// Parallel: it waits out a Redis outage, on its own redis-server and queue.
	t.Parallel()
	const (
		sinkTimeout  = 3 * time.Second
		claimIdle    = 2 * sinkTimeout
		redisTimeout = 500 * time.Millisecond
		resetMsg     = "notification outbox was reset; pending notifications are lost"
	)
	rs := startPrivateRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: rs.addr})
	t.Cleanup(func() { rc.Close() })
	prefix := "e2e:reset:"
	fq := newSQSFake(t, "tasks")
	// The first event is told to come back after BackoffMax, so it waits
	// in the outbox through the restart; the others are delivered.
	hook := newFaultHook(t, func(i int, h http.Header) int {
		if i == 0 {
			h.Set("Retry-After", fmt.Sprint(int(notify.DefaultBackoffMax.Seconds())))
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	cfg := sqsAgentConfig{instance: "agent-z", workers: 2, queueURL: fq.url, redisAddr: rs.addr, prefix: prefix, redisTimeout: redisTimeout}
	yaml := cfg.yaml() + faultNotifyYAML(hook.srv.URL, sinkTimeout, claimIdle, "succeeded")
	a := startProc(t, yaml, append([]string{"E2E_WEBHOOK_SECRET=" + webhookSecret}, fq.env...)...)

	fq.send(t, sqsTaskBody("z-1", "noop"))
	eventually(t, 30*time.Second, "z-1's event refused with 503", func() bool { return len(hook.all()) == 1 })
	lost := hook.all()[0].delivery
	a.awaitLogsWhere("msg", "notification failed; will retry", "delivery_id", lost)
	if n := outboxLen(t, rc, prefix); n != 1 {
		t.Fatalf("outbox holds %d entries before the restart, want z-1's", n)
	}

	rs.kill()
	downAt := time.Now()
	// Down long enough for the dispatcher to fail a few claims: it neither
	// exits nor spins meanwhile.
	// Each dispatcher cycle is a claim and a read of the pending gauge, each
	// bounded by redis.timeout, then a poll interval's wait; the first
	// failed claim comes within one cycle of the kill, on an idle machine.
	const failedClaims = 3
	const cycle = notify.DefaultPollInterval + 2*redisTimeout
	eventually(t, (failedClaims+1)*cycle+loadAllowance,
		"failed claims logged while Redis is down", func() bool { return len(a.logsWhere("msg", "claim notifications")) >= failedClaims })
	rs.start() // empty: no RDB, no AOF
	upAt := time.Now()

	// Tasks keep flowing: a task after the restart is recorded in the new
	// Redis and its event delivered, read from the recreated group.
	fq.send(t, sqsTaskBody("z-2", "noop"))
	eventually(t, 30*time.Second, "z-2 recorded as succeeded in the restarted Redis", func() bool {
		rec, ok := sqsTaskRecord(t, rc, prefix, "z-2")
		return ok && rec.Outcome == "succeeded"
	})
	var z2 string
	eventually(t, 30*time.Second, "z-2's event delivered", func() bool {
		for _, r := range hook.all() {
			if r.status == http.StatusOK && bytes.Contains(r.body, []byte(`"id":"z-2"`)) {
				z2 = r.delivery
				return true
			}
		}
		return false
	})
	reset := a.awaitLogsWhere("msg", resetMsg)
	if len(reset) != 1 || reset[0]["level"] != "ERROR" {
		t.Errorf("reset log lines %v, want one at ERROR", reset)
	}
	if n := sqsMetric(a, "autodiag_outbox_resets_total"); n != 1 {
		t.Errorf("autodiag_outbox_resets_total = %v, want 1", n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	groups, err := rc.XInfoGroups(ctx, outboxKey(prefix)).Result()
	cancel()
	if err != nil || len(groups) != 1 || groups[0].Name != outboxGroup {
		t.Errorf("outbox groups after the restart: %+v %v, want the group %s", groups, err, outboxGroup)
	}

	// A later task: delivered too, and no further reset (the outbox does
	// not mistake itself for gone again).
	fq.send(t, sqsTaskBody("z-3", "noop"))
	eventually(t, 30*time.Second, "z-3's event delivered", func() bool {
		for _, r := range hook.all() {
			if r.status == http.StatusOK && bytes.Contains(r.body, []byte(`"id":"z-3"`)) {
				return true
			}
		}
		return false
	})
	eventually(t, redisTimeout+notify.DefaultPollInterval+loadAllowance, "the outbox empty", func() bool { return outboxLen(t, rc, prefix) == 0 })
	select {
	case <-a.Done():
		t.Fatalf("the agent exited: %v", a.Err())
	default:
	}
	if n := sqsMetric(a, "autodiag_outbox_resets_total"); n != 1 {
		t.Errorf("autodiag_outbox_resets_total = %v after another task, want still 1", n)
	}
	if n := len(a.logsWhere("msg", resetMsg)); n != 1 {
		t.Errorf("%d reset log lines after another task, want 1", n)
	}
	// z-1's entry went with the old Redis: tried once, never again.
	if n := len(hook.of(lost)); n != 1 {
		t.Errorf("z-1's event tried %d times, want once (lost with the restart)", n)
	}
	// No spin: while Redis was down the dispatcher tried once per
	// DefaultPollInterval.
	warns := len(a.logsWhere("msg", "claim notifications"))
	if most := int(upAt.Sub(downAt)/notify.DefaultPollInterval) + 2; warns > most {
		t.Errorf("%d failed claims logged over a %.3fs outage, want at most %d (one per poll interval)", warns, upAt.Sub(downAt).Seconds(), most)
	}
	t.Logf("REPORT redis restarted empty: outage %.3fs, %d failed claims logged, z-2 delivered as %s",
		upAt.Sub(downAt).Seconds(), warns, z2)
	sqsDrainAll(t, a)
}

// A lifecycle drain with a Slack sink that accepts connections and never
// answers: the agent holds a task's event and its own drain events in
// requests that hang, and still calls CompleteLifecycleAction at its drain
// deadline (drain started + drain_timeout), not after the sink's timeout;
// the undelivered events stay in the outbox for other agents.
func TestNotifyDrainSlackNeverAnswersE2E(t *testing.T) {
	const (
		drainTimeout = 2 * time.Second
		heartbeat    = 500 * time.Millisecond
		// The sink's timeout, far past the drain's: only the drain's bound
		// can end its requests in time.
		sinkTimeout = 10 * drainTimeout
	)
	l := lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second, notify: true})
	slack := newFaultHook(t, func(int, http.Header) int { return hold })
	cfg := l.config(2, fmt.Sprintf("  sources: [signal, sqs]\n  queue_url: %s\n  hook_name: %s\n  heartbeat_interval: %s\n  drain_timeout: %s\n",
		l.lcQURL, lcLabHook, heartbeat, drainTimeout))
	// The catalog's timeout has to fit the drain.
	cfg = strings.Replace(cfg, "    timeout: 1m\n", "    timeout: "+drainTimeout.String()+"\n", 1)
	cfg += fmt.Sprintf("notify:\n  - name: oncall-slack\n    type: slack\n    url_env: E2E_SLACK_URL\n    allow_http: true\n"+
		"    timeout: %s\n    on: [succeeded, drain_started, drain_completed, drain_failed]\n", sinkTimeout)
	p := startProc(t, cfg, append(l.env(), "E2E_SLACK_URL="+slack.srv.URL+"/services/T000/B000/e2e")...)

	// A task's event is held by the sink when the drain begins.
	l.enqueue([]float64{0.05})
	eventually(t, 30*time.Second, "the task's event at the Slack sink", func() bool { return len(slack.all()) == 1 })
	eventually(t, 30*time.Second, "the agent polling the lifecycle queue", func() bool { return l.sqs.Pollers(lcNotifyQueue) > 0 })
	if _, err := l.asg.Terminate(lcMockInstance); err != nil {
		t.Fatal(err)
	}
	// Bounded by the sink's timeout: an agent waiting for the sink would
	// still exit, late, and fail the checks below rather than this wait.
	if code := p.wait(sinkTimeout + drainTimeout); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}

	started, line := lcFirstLog(t, p, "drain started")
	ds, _ := line["deadline"].(string)
	deadline, err := time.Parse(time.RFC3339Nano, ds)
	if err != nil {
		t.Fatalf("drain started without a deadline: %v", line)
	}
	if d := deadline.Sub(started); d > drainTimeout || d < drainTimeout-heartbeat {
		t.Errorf("drain deadline %s after its start line, want drain_timeout %s", lcMS(d), drainTimeout)
	}
	var done []lcCall
	for _, c := range l.asgRec.log("CompleteLifecycleAction", "") {
		if c.Status == http.StatusOK {
			done = append(done, c)
		}
	}
	if len(done) != 1 || l.asg.Count("CompleteLifecycleAction", "ok") != 1 {
		t.Fatalf("%d successful completions, want 1", len(done))
	}
	// The completion follows the notifications' bound, the drain deadline;
	// a completion that waited for the sink would come sinkTimeout after
	// the requests began. One heartbeat interval covers the call itself.
	if late := done[0].End.Sub(deadline); late > heartbeat {
		t.Errorf("CompleteLifecycleAction ended %s after the drain deadline, want within heartbeat_interval %s", lcMS(late), heartbeat)
	}
	p.awaitLogsWhere("msg", "notifications cut short by the drain deadline; the outbox keeps them for other agents")

	// The sink got the task's event and drain_started, answered neither,
	// and every request was held until the drain's deadline cut it.
	reqs := slack.all()
	sawDrain := false
	for i, r := range reqs {
		sawDrain = sawDrain || bytes.Contains(r.body, []byte("drain started on "+lcMockInstance))
		if r.status != hold {
			t.Errorf("Slack request %d was answered %d", i, r.status)
		}
		if r.ended.Before(deadline) {
			t.Errorf("Slack request %d ended %s before the drain deadline: the agent gave up early", i, lcMS(deadline.Sub(r.ended)))
		}
	}
	if len(reqs) < 2 || !sawDrain {
		t.Errorf("%d Slack requests (drain_started among them: %v), want the task's event and drain_started", len(reqs), sawDrain)
	}
	// What was not delivered waits in the outbox for the fleet.
	rc := redis.NewClient(&redis.Options{Addr: l.redis})
	t.Cleanup(func() { rc.Close() })
	if n := outboxLen(t, rc, l.prefix); n < 2 {
		t.Errorf("outbox holds %d entries after the drain, want the undelivered ones (at least the task's and drain_started)", n)
	}
	t.Logf("REPORT drain with a Slack sink that never answers: completion ended %s after the drain deadline (drain_timeout %s, sink timeout %s), %d Slack requests held",
		lcMS(done[0].End.Sub(deadline)), drainTimeout, sinkTimeout, len(reqs))
}
