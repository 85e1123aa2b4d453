package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/internal/harness"
	"github.com/autodiag/autodiag/internal/testenv"
)

// End-to-end tests of the agent under faults: Redis lost, dead-letter
// sends failing, visibility shorter than the wait for a worker, deferrals
// past the queue's maxReceiveCount.

// privateRedis is a redis-server this test owns (harness.Redis), on a
// free loopback port, so that it can be killed without touching the
// shared one that parallel tests use.
type privateRedis struct {
	*harness.Redis
	t    *testing.T
	addr string
}

func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	// The shared server's presence says the machine runs Redis tests.
	testenv.RedisAddr(t)
	// Outside the ephemeral range (testenv.ClosedPort): during an outage no
	// outgoing connection, the agent's own reconnects included, can take
	// the port that the server comes back on.
	r, err := harness.StartRedis(t.TempDir(), "127.0.0.1:"+testenv.ClosedPort(t))
	if err != nil {
		t.Fatalf("a private redis-server: %v", err)
	}
	t.Cleanup(r.Kill)
	return &privateRedis{Redis: r, t: t, addr: r.Addr}
}

// start runs redis-server on r.addr again, empty, and waits until it
// answers.
func (r *privateRedis) start() {
	r.t.Helper()
	if err := r.Start(); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
}

// kill sends SIGKILL and waits for the server to be gone.
func (r *privateRedis) kill() { r.Kill() }

// labelledMetric returns the value of series name{labels} in /metrics, 0
// when absent; labels as written, e.g. `op="claim"`.
func labelledMetric(p *proc, name, labels string) float64 {
	p.t.Helper()
	return harness.Series(p.metrics(), name, labels)
}

// withRules puts limiter rules (YAML list items, indented four spaces)
// and redis keys into an sqsAgentConfig's YAML.
func withRules(yaml, rules, redisKeys string) string {
	if rules != "" {
		yaml = strings.Replace(yaml, "  rules: []\n", "  rules:\n"+rules, 1)
	}
	if redisKeys != "" {
		yaml = strings.Replace(yaml, "redis:\n", "redis:\n"+redisKeys, 1)
	}
	return yaml
}

// TestSQSRedisOutageFailOpen: Redis killed for at least 10 s under an agent with
// redis.state_fail open and a limiter rule with fail: open. Tasks sent
// during the outage run and succeed while Redis is down, both degraded
// counters rise, and their records are written once Redis is back.
func TestSQSRedisOutageFailOpen(t *testing.T) {
	// Parallel: it waits out the outage, on its own redis-server and queue.
	t.Parallel()
	const (
		outage       = 10 * time.Second
		redisTimeout = 200 * time.Millisecond
		// backlogRetryMax is the agent's longest pause between attempts
		// to write the records it kept (worker.BacklogRetryMax).
		backlogRetryMax = 30 * time.Second
	)
	rs := startPrivateRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: rs.addr})
	t.Cleanup(func() { rc.Close() })
	prefix := "e2e:outage:"
	fq := newSQSFake(t, "tasks")
	led := newSQSLedger(t)
	cfg := sqsAgentConfig{instance: "agent-o", workers: 2, queueURL: fq.url, visibility: 2 * time.Second,
		redisAddr: rs.addr, prefix: prefix, redisTimeout: redisTimeout, ledger: led}
	yaml := withRules(cfg.yaml(), `    - name: cap
      key: host
      limits: [{window: {count: 1000, per: 1m}}]
      fail: open
`, "  state_fail: open\n")
	a := startProc(t, yaml, fq.env...)

	fq.send(t, sqsTaskBody("before-1", "mark"), sqsTaskBody("before-2", "mark"))
	eventually(t, 20*time.Second, "tasks before the outage recorded", func() bool {
		r1, _ := sqsTaskRecord(t, rc, prefix, "before-1")
		r2, _ := sqsTaskRecord(t, rc, prefix, "before-2")
		return r1.Status == state.StatusDone && r2.Status == state.StatusDone
	})

	rs.kill()
	killed := time.Now()
	during := []string{"during-1", "during-2", "during-3", "during-4"}
	var bodies []string
	for _, id := range during {
		bodies = append(bodies, sqsTaskBody(id, "mark"))
	}
	fq.send(t, bodies...)
	// Redis stays down until every task has succeeded, however long a
	// loaded machine takes to run them: each spends a few redis.timeout on
	// the store and the limiter, so they end well inside the outage on an
	// idle one, and the outage lasts at least that long.
	eventually(t, outage+30*time.Second, "tasks succeeding during the outage", func() bool {
		return sqsOutcomes(a)["succeeded"] == 2+len(during)
	})
	t.Logf("the outage's tasks succeeded %.2fs after the kill", time.Since(killed).Seconds())
	for _, id := range during {
		if n := led.counts(t)[id]; n != 1 {
			t.Errorf("%s executed %d times during the outage, want once", id, n)
		}
	}
	if v := sqsMetric(a, "autodiag_limiter_degraded_total"); v < float64(len(during)) {
		t.Errorf("autodiag_limiter_degraded_total = %v, want >= %d", v, len(during))
	}
	for _, op := range []string{"claim", "finish"} {
		if v := labelledMetric(a, "autodiag_state_degraded_total", `op="`+op+`"`); v < float64(len(during)) {
			t.Errorf(`autodiag_state_degraded_total{op=%q} = %v, want >= %d`, op, v, len(during))
		}
	}

	time.Sleep(time.Until(killed.Add(outage)))
	rs.start()
	eventually(t, backlogRetryMax+10*time.Second, "records of the outage's tasks written after Redis returned", func() bool {
		for _, id := range during {
			if rec, _ := sqsTaskRecord(t, rc, prefix, id); rec.Status != state.StatusDone || rec.Outcome != "succeeded" {
				return false
			}
		}
		return true
	})
	if !fq.drained(t) {
		t.Error("messages left on the queue")
	}
	sqsDrainAll(t, a)
}

// TestSQSRejectedHugeMessageOneOutcome: a rejected message near SQS's
// 256 KiB limit (invalid host, big body, string attributes) whose first
// dead-letter sends fail comes back and is dead-lettered on a later
// delivery: one rejected outcome, one DLQ copy that fits.
func TestSQSRejectedHugeMessageOneOutcome(t *testing.T) {
	fq := newSQSFake(t, "tasks")
	dlqURL, err := fq.srv.CreateQueue("tasks-dlq", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Every SendMessage to the DLQ of the first delivery fails: the SDK's
	// three attempts for each of DeadLetter's four, and one more call.
	const dlqFailures = 3*4 + 3
	failDLQ := fq.srv.InjectFault(sqsfake.Fault{Op: "SendMessage", Queue: "tasks-dlq", Kind: sqsfake.FaultServerError, Count: dlqFailures})
	a := startProc(t, sqsAgentConfig{instance: "agent-r", workers: 1, queueURL: fq.url, dlqURL: dlqURL}.yaml(), fq.env...)

	const maxSize = 262144
	attrs := map[string]types.MessageAttributeValue{}
	attrBytes := 0
	for i := range 5 {
		name, val := fmt.Sprintf("origin-%d", i), strings.Repeat("a", 200)
		attrs[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(val)}
		attrBytes += len(name) + len("String") + len(val)
	}
	prefix := `{"id":"huge-1","host":"not a host!","diagnostic":"noop","params":{"pad":"`
	suffix := `"}}`
	pad := strings.Repeat("x", maxSize-attrBytes-len(prefix)-len(suffix)-16)
	body := prefix + pad + suffix
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent, err := fq.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(fq.url), MessageBody: aws.String(body), MessageAttributes: attrs})
	if err != nil {
		t.Fatalf("sending a %d-byte message: %v", len(body)+attrBytes, err)
	}

	// The message comes back after the failed copy's backoff (seconds)
	// and the copy then succeeds.
	eventually(t, 60*time.Second, "the message dead-lettered and gone from the task queue", func() bool {
		d, _ := fq.srv.Queue("tasks-dlq")
		return d.Stats.Sent+d.Stats.MovedIn >= 1 && fq.drained(t)
	})
	if n := fq.srv.FaultFired(failDLQ); n != dlqFailures {
		t.Errorf("DLQ send faults fired %d times, want %d", n, dlqFailures)
	}
	v, _ := fq.srv.Queue("tasks")
	if len(v.History) != 1 || v.History[0].ID != aws.ToString(sent.MessageId) || v.History[0].ReceiveCount < 2 {
		t.Errorf("task queue history %+v, want the one message received at least twice", v.History)
	}
	d, _ := fq.srv.Queue("tasks-dlq")
	if d.Stats.Sent != 1 || len(d.Messages) != 1 {
		t.Fatalf("DLQ: %d sent, %d held; want exactly one copy", d.Stats.Sent, len(d.Messages))
	}
	cp := d.Messages[0]
	if _, ok := cp.Attributes[queue.RejectReasonAttribute]; !ok {
		t.Errorf("DLQ copy attributes %v, want %s", cp.Attributes, queue.RejectReasonAttribute)
	}
	if o := sqsOutcomes(a); o["rejected"] != 1 {
		t.Errorf("outcomes %v, want exactly one rejected however often the message came back", o)
	}
	if n := len(a.awaitLogsWhere("msg", "task ended", "outcome", "rejected")); n != 1 {
		t.Errorf("%d 'task ended' lines with outcome rejected, want 1", n)
	}
	sqsDrainAll(t, a)
}

// TestSQSPrefetchedShortVisibility: one worker, a 2 s visibility and 3 s
// tasks: the message received ahead waits longer than its visibility for
// the worker, yet each task runs once and each message is received once.
func TestSQSPrefetchedShortVisibility(t *testing.T) {
	// Parallel: it waits on three 3 s tasks, on its own queue and ledger.
	t.Parallel()
	fq := newSQSFake(t, "tasks")
	led := newSQSLedger(t)
	const vis = 2 * time.Second
	a := startProc(t, sqsAgentConfig{instance: "agent-p", workers: 1, queueURL: fq.url, visibility: vis, ledger: led}.yaml(), fq.env...)
	ids := []string{"p-1", "p-2", "p-3"}
	var bodies []string
	for _, id := range ids {
		bodies = append(bodies, sqsTaskBody(id, "slow"))
	}
	fq.send(t, bodies...)
	// Three 3 s tasks one after another, plus a visibility's slack.
	eventually(t, 3*3*time.Second+10*vis, "every task run and deleted", func() bool {
		return len(led.counts(t)) == len(ids) && fq.drained(t)
	})
	for _, id := range ids {
		if n := led.counts(t)[id]; n != 1 {
			t.Errorf("%s executed %d times, want once", id, n)
		}
	}
	v, _ := fq.srv.Queue("tasks")
	for _, m := range v.History {
		if m.ReceiveCount != 1 || m.State != "deleted" {
			t.Errorf("message %s: received %d times, %s; want received once and deleted", m.ID, m.ReceiveCount, m.State)
		}
	}
	if o := sqsOutcomes(a); o["succeeded"] != len(ids) || o["duplicate"] != 0 {
		t.Errorf("outcomes %v, want %d succeeded and no duplicate", o, len(ids))
	}
	sqsDrainAll(t, a)
}

// TestSQSDeferredPastMaxReceiveCount: five tasks for one host under a rule
// allowing one per second with on_exceed: defer, on a queue whose redrive
// policy dead-letters at the second receive. The last task is deferred
// more times than maxReceiveCount, yet every task runs exactly once and
// none reaches the DLQ.
func TestSQSDeferredPastMaxReceiveCount(t *testing.T) {
	const maxReceiveCount = 2
	fq := newSQSFake(t, "unused")
	if _, err := fq.srv.CreateQueue("tasks-dlq", nil); err != nil {
		t.Fatal(err)
	}
	dlq, _ := fq.srv.Queue("tasks-dlq")
	url, err := fq.srv.CreateQueue("tasks", map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, dlq.ARN, maxReceiveCount),
	})
	if err != nil {
		t.Fatal(err)
	}
	tasks := &sqsFake{SQS: fq.SQS, srv: fq.srv, client: fq.client, name: "tasks", url: url, env: fq.env}
	led := newSQSLedger(t)
	yaml := withRules(sqsAgentConfig{instance: "agent-d", workers: 2, queueURL: url, ledger: led}.yaml(), `    - name: spaced
      key: host
      limits: [{window: {count: 1, per: 1s}}]
      on_exceed: defer
`, "")
	a := startProc(t, yaml, fq.env...)
	ids := []string{"d-1", "d-2", "d-3", "d-4", "d-5"}
	var bodies []string
	for _, id := range ids {
		bodies = append(bodies, sqsTaskBody(id, "mark"))
	}
	tasks.send(t, bodies...)
	// One task a second, each deferral rounded up to whole seconds.
	eventually(t, time.Duration(len(ids))*2*time.Second+20*time.Second, "every task run and every message gone", func() bool {
		return len(led.counts(t)) == len(ids) && tasks.drained(t)
	})
	for _, id := range ids {
		if n := led.counts(t)[id]; n != 1 {
			t.Errorf("%s executed %d times, want once", id, n)
		}
	}
	most := 0
	for _, id := range ids {
		most = max(most, len(a.logsWhere("msg", "task deferred", "task_id", id)))
	}
	if most <= maxReceiveCount {
		t.Errorf("no task was deferred more than maxReceiveCount (%d) times (most: %d); the test proves nothing", maxReceiveCount, most)
	}
	d, _ := fq.srv.Queue("tasks-dlq")
	if d.Stats.MovedIn != 0 || d.Stats.Sent != 0 || len(d.Messages) != 0 {
		t.Errorf("DLQ received %d moved and %d sent messages, want none", d.Stats.MovedIn, d.Stats.Sent)
	}
	if o := sqsOutcomes(a); o["succeeded"] != len(ids) {
		t.Errorf("outcomes %v, want %d succeeded", o, len(ids))
	}
	sqsDrainAll(t, a)
}
