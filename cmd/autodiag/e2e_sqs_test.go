package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestSQSFleetExactlyOnce: 500 tasks on the
// SQS fake, 3 real agents sharing one redis-server, with duplicates
// injected two ways — 50 bodies sent twice, and deliveries SQS makes again
// after a short visibility timeout lapses (lost ReceiveMessage responses,
// failed DeleteMessageBatch calls, failed visibility extensions of tasks
// that run longer than the visibility timeout). Every task id must run
// exactly once, every message must be deleted, nothing may be left in
// flight in Redis, and the outcome totals must add up to the deliveries.
func TestSQSFleetExactlyOnce(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks", sqsfake.WithSeed(4))
	led := newSQSLedger(t)

	const tasks = 500
	var bodies, ids []string
	dups := 0
	for i := range tasks {
		id := fmt.Sprintf("t-%03d", i)
		diag := "mark"
		if i%25 == 7 {
			diag = "slow" // 3s, longer than the 2s visibility timeout
		}
		ids = append(ids, id)
		bodies = append(bodies, sqsTaskBody(id, diag))
		if i%10 == 3 {
			// The same body again, next to the first: often in the same
			// receive batch, so often on the same agent at once.
			bodies = append(bodies, sqsTaskBody(id, diag))
			dups++
		}
	}

	// Forced redeliveries: each of these leaves a delivered message in
	// flight until its 2s visibility lapses.
	dropRecv := fq.srv.InjectFault(sqsfake.Fault{Op: "ReceiveMessage", Kind: sqsfake.FaultDropResponse, Probability: 0.1, Count: 6})
	failDel := fq.srv.InjectFault(sqsfake.Fault{Op: "DeleteMessageBatch", Kind: sqsfake.FaultServerError, Skip: 3, Count: 9})
	// Half the visibility changes are answered after 1s, past the 0.67s an
	// extension may take: a slow task whose extensions fail in a row is
	// delivered again while it runs.
	failExt := fq.srv.InjectFault(sqsfake.Fault{Op: "ChangeMessageVisibilityBatch", Kind: sqsfake.FaultLatency, Latency: time.Second, Probability: 0.5})
	fq.srv.InjectFault(sqsfake.Fault{Op: "ReceiveMessage", Kind: sqsfake.FaultThrottle, Probability: 0.05, Count: 5})

	var agents []*proc
	for i := range 3 {
		cfg := sqsAgentConfig{instance: fmt.Sprintf("agent-%d", i), workers: 8, queueURL: fq.url,
			visibility: 2 * time.Second, redisAddr: testenv.RedisAddr(t), prefix: prefix, ledger: led}
		agents = append(agents, startProc(t, cfg.yaml(), fq.env...))
	}
	fq.send(t, bodies...)

	eventually(t, 100*time.Second, "every task executed and every message deleted", func() bool {
		return len(led.counts(t)) == tasks && fq.drained(t)
	})

	counts := led.counts(t)
	for _, id := range ids {
		if counts[id] != 1 {
			t.Errorf("task %s executed %d times, want exactly once", id, counts[id])
		}
	}
	if len(counts) != tasks {
		t.Errorf("ledger has %d ids, want %d", len(counts), tasks)
	}

	_, _, _, st := fq.stats(t)
	if st.Sent != tasks+dups || st.Deleted != st.Sent {
		t.Errorf("queue stats %+v: want %d sent, all deleted", st, tasks+dups)
	}
	redelivered := st.Received - st.Sent
	t.Logf("deliveries %d for %d messages (%d redeliveries); stale deletes %d; faults fired: lost receives %d, failed delete batches %d, slow visibility changes %d",
		st.Received, st.Sent, redelivered, st.StaleDeletes, fq.srv.FaultFired(dropRecv), fq.srv.FaultFired(failDel), fq.srv.FaultFired(failExt))
	if redelivered <= 0 {
		t.Errorf("no message was delivered twice; the test injected no redelivery")
	}

	// Outcome totals: across the fleet 500 succeeded, nothing else but
	// duplicates; every delivery an agent saw ended as succeeded or
	// duplicate, or was handed back because the task was running.
	for _, a := range agents {
		// An agent counts an outcome just before it writes the line.
		eventually(t, 10*time.Second, "every outcome's log line read", func() bool {
			n := 0
			for _, v := range sqsOutcomes(a) {
				n += v
			}
			return len(a.logs("task ended")) == n
		})
	}
	total := map[string]int{}
	received, deferred := 0, 0
	for _, a := range agents {
		for k, v := range sqsOutcomes(a) {
			total[k] += v
		}
		received += int(sqsMetric(a, "autodiag_tasks_received_total"))
		deferred += len(a.logsWhere("msg", "task deferred", "reason", "running_elsewhere")) +
			len(a.logsWhere("msg", "task deferred", "reason", "running_here"))
	}
	for k, v := range total {
		if k != "succeeded" && k != "duplicate" && v != 0 {
			t.Errorf("%d tasks ended %s, want none", v, k)
		}
	}
	if total["succeeded"] != tasks {
		t.Errorf("succeeded = %d, want %d", total["succeeded"], tasks)
	}
	if total["duplicate"] < dups {
		t.Errorf("duplicate = %d, want at least the %d bodies sent twice", total["duplicate"], dups)
	}
	if got := total["succeeded"] + total["duplicate"] + deferred; got != received {
		t.Errorf("succeeded %d + duplicate %d + deferred %d = %d, want the %d deliveries the agents received",
			total["succeeded"], total["duplicate"], deferred, got, received)
		for _, a := range agents {
			msgs := map[string]int{}
			for _, l := range a.logs("") {
				msgs[fmt.Sprint(l["level"], " ", l["msg"], " ", l["outcome"], " ", l["reason"])]++
			}
			t.Logf("log lines of an agent by level, message, outcome and reason: %v", msgs)
		}
	}
	lost := 0
	for _, c := range fq.srv.Calls("ReceiveMessage") {
		if c.Status == 0 {
			lost += c.N
		}
	}
	if received+lost != st.Received {
		t.Errorf("agents received %d + %d in lost responses, queue delivered %d", received, lost, st.Received)
	}

	// Nothing in flight in Redis: per instance, and in the fleet view.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store := state.NewRedis(rc, state.RedisOptions{Prefix: prefix})
	for i := range agents {
		inst := fmt.Sprintf("agent-%d", i)
		if left, err := store.Inflight(ctx, inst); err != nil || len(left) != 0 {
			t.Errorf("in flight on %s after the run: %v %v", inst, left, err)
		}
		// Not even a stale entry that Inflight would filter out.
		if n, err := rc.HLen(ctx, prefix+"inflight:"+inst).Result(); err != nil || n != 0 {
			t.Errorf("%sinflight:%s holds %d entries (%v), want none", prefix, inst, n, err)
		}
	}
	var leases []string
	for it := rc.Scan(ctx, 0, prefix+"lease:*", 1000).Iterator(); it.Next(ctx); {
		leases = append(leases, it.Val())
	}
	if len(leases) != 0 {
		t.Errorf("execution leases still held after the run: %v", leases)
	}
	for _, id := range ids {
		if rec, ok := sqsTaskRecord(t, rc, prefix, id); !ok || rec.Status != state.StatusDone || rec.Outcome != "succeeded" || rec.Attempts != 1 {
			t.Errorf("record of %s = %+v (found %v), want done, succeeded, 1 attempt", id, rec, ok)
		}
	}
	fv := sqsFleetStatus(t, fq, sqsAgentConfig{instance: "cli", workers: 1, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: prefix})
	if len(fv.Instances) != 3 {
		t.Errorf("status --json lists %d instances, want 3", len(fv.Instances))
	}
	for _, in := range fv.Instances {
		if in.State != "running" || len(in.Tasks) != 0 {
			t.Errorf("status --json: instance %s state %s with %d tasks in flight, want running with none", in.ID, in.State, len(in.Tasks))
		}
	}

	// A drain of each flushes and exits 0.
	sqsDrainAll(t, agents...)
	if !fq.drained(t) {
		t.Error("queue not empty after the drains")
	}
}

// sqsFleetView is what the tests read of `autodiag status --json`.
type sqsFleetView struct {
	Instances []struct {
		ID    string `json:"id"`
		State string `json:"state"`
		Tasks []struct {
			TaskID string `json:"task_id"`
			Age    string `json:"age"`
		} `json:"tasks"`
	} `json:"instances"`
	Recent []struct {
		TaskID     string `json:"task_id"`
		InstanceID string `json:"instance_id"`
		Outcome    string `json:"outcome"`
	} `json:"recent"`
	RecentOutcomes map[string]int `json:"recent_outcomes"`
}

// sqsFleetStatus runs `autodiag status --json` against cfg's Redis.
func sqsFleetStatus(t *testing.T, fq *sqsFake, cfg sqsAgentConfig) sqsFleetView {
	t.Helper()
	code, stdout, stderr := runCLI(t, fq.awsEnv(), "status", "--json", "--recent", "50", "--config", sqsWriteConfig(t, cfg.yaml()))
	if code != 0 {
		t.Fatalf("status --json: exit %d: %s", code, stderr)
	}
	var fv sqsFleetView
	if err := json.Unmarshal([]byte(stdout), &fv); err != nil {
		t.Fatalf("status --json output: %v\n%s", err, stdout)
	}
	return fv
}

// TestSQSKill9TakeOver: an agent killed with SIGKILL mid-task leaves the
// message in flight and its lease in Redis; once both lapse another agent
// runs the task again, exactly once more, and the record ends succeeded
// with attempts=2.
func TestSQSKill9TakeOver(t *testing.T) {
	rc, prefix, fq, led, a, b := sqsTakeoverLab(t)
	sqsKill9(a)
	// The diagnostic agent-a started is orphaned, still at the gate; open
	// the gate only once agent-b runs the task, so both finish after.
	eventually(t, 30*time.Second, "k-1 running again on agent-b", func() bool { return led.counts(t)["k-1"] == 2 })
	led.open()
	eventually(t, 30*time.Second, "k-1 done and its message deleted", func() bool {
		rec, _ := sqsTaskRecord(t, rc, prefix, "k-1")
		return rec.Status == state.StatusDone && fq.drained(t)
	})

	rec, _ := sqsTaskRecord(t, rc, prefix, "k-1")
	if rec.Outcome != "succeeded" || rec.Attempts != 2 || rec.Owner != "agent-b" {
		t.Errorf("record = %+v, want succeeded with attempts=2, owner agent-b", rec)
	}
	if n := led.counts(t)["k-1"]; n != 2 {
		t.Errorf("k-1 executed %d times, want 2 (once on each agent)", n)
	}
	if o := sqsOutcomes(b); o["succeeded"] != 1 {
		t.Errorf("agent-b outcomes %v, want one succeeded", o)
	}
	v, _ := fq.srv.Queue("tasks")
	if len(v.History) != 1 || v.History[0].State != "deleted" || v.History[0].ReceiveCount < 2 {
		t.Errorf("message history %+v, want one message received at least twice, deleted", v.History)
	}
	sqsNoneInFlight(t, rc, prefix, "agent-a", "agent-b")
	sqsDrainAll(t, b)
}

// TestSQSStalledAgentKeepsLaterAttempt: an agent frozen (SIGSTOP) mid-task
// cannot renew its lease; another agent runs the task again and records
// attempt 2. When the frozen agent resumes, its diagnostic has long ended;
// its late result must not overwrite the later attempt's record.
func TestSQSStalledAgentKeepsLaterAttempt(t *testing.T) {
	rc, prefix, _, led, a, b := sqsTakeoverLab(t)
	a.signal(syscall.SIGSTOP)
	eventually(t, 30*time.Second, "k-1 running again on agent-b", func() bool { return led.counts(t)["k-1"] == 2 })
	led.open() // both diagnostics end; agent-a cannot notice until it resumes
	eventually(t, 30*time.Second, "agent-b's attempt recorded", func() bool {
		rec, _ := sqsTaskRecord(t, rc, prefix, "k-1")
		return rec.Status == state.StatusDone
	})
	a.signal(syscall.SIGCONT)
	eventually(t, 30*time.Second, "agent-a ends its stale run", func() bool { return sqsOutcomes(a)["succeeded"] == 1 })

	// The log line precedes the outcome count.
	eventually(t, 10*time.Second, "agent-a reports its result superseded", func() bool {
		return len(a.logsWhere("msg", "lease lapsed while running", "task_id", "k-1")) == 1
	})
	rec, _ := sqsTaskRecord(t, rc, prefix, "k-1")
	if rec.Owner != "agent-b" || rec.Attempts != 2 || rec.Outcome != "succeeded" || rec.Status != state.StatusDone {
		t.Errorf("record = %+v, want agent-b's succeeded attempt 2", rec)
	}
	if n := led.counts(t)["k-1"]; n != 2 {
		t.Errorf("k-1 executed %d times, want 2", n)
	}
	sqsNoneInFlight(t, rc, prefix, "agent-a", "agent-b")
	sqsDrainAll(t, a, b)
}

// TestSQSKill9RestartRecovers: an agent killed with SIGKILL mid-task and
// restarted under the same instance id finds its stale in-flight entry,
// marks the task interrupted and leaves it to SQS; the redelivery runs it
// once more (attempts=2) and nothing stays in flight.
func TestSQSKill9RestartRecovers(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	led := newSQSLedger(t)
	cfg := sqsAgentConfig{instance: "agent-r", workers: 2, queueURL: fq.url, visibility: 2 * time.Second,
		redisAddr: testenv.RedisAddr(t), prefix: prefix, ledger: led}.yaml()

	a := startProc(t, cfg, fq.env...)
	fq.send(t, sqsTaskBody("r-1", "gate"))
	eventually(t, 20*time.Second, "r-1 running", func() bool { return led.counts(t)["r-1"] == 1 })
	sqsKill9(a)
	a2 := startProc(t, cfg, fq.env...)
	eventually(t, 20*time.Second, "the restarted agent recovering r-1", func() bool {
		return len(a2.logsWhere("msg", "task interrupted", "task_id", "r-1")) > 0
	})
	eventually(t, 30*time.Second, "r-1 running again", func() bool { return led.counts(t)["r-1"] == 2 })
	led.open()
	eventually(t, 30*time.Second, "r-1 done and its message deleted", func() bool {
		rec, _ := sqsTaskRecord(t, rc, prefix, "r-1")
		return rec.Status == state.StatusDone && fq.drained(t)
	})
	if rec, _ := sqsTaskRecord(t, rc, prefix, "r-1"); rec.Outcome != "succeeded" || rec.Attempts != 2 || rec.Owner != "agent-r" {
		t.Errorf("record = %+v, want succeeded with attempts=2 on agent-r", rec)
	}
	if n := led.counts(t)["r-1"]; n != 2 {
		t.Errorf("r-1 executed %d times, want 2", n)
	}
	fv := sqsFleetStatus(t, fq, sqsAgentConfig{instance: "cli", workers: 1, queueURL: fq.url, redisAddr: testenv.RedisAddr(t), prefix: prefix})
	interrupted := false
	for _, e := range fv.Recent {
		interrupted = interrupted || e.TaskID == "r-1" && e.Outcome == "interrupted"
	}
	if !interrupted {
		t.Errorf("status --json recent %+v lacks r-1 interrupted", fv.Recent)
	}
	for _, in := range fv.Instances {
		if len(in.Tasks) != 0 {
			t.Errorf("status --json: %s has %d tasks in flight, want none", in.ID, len(in.Tasks))
		}
	}
	sqsDrainAll(t, a2)
}

// longVisibility is the visibility timeout of TestSQSLongTaskNotRedelivered.
// The agent extends a message every third of it, so an agent (or the fake
// answering it) held back by a loaded machine for up to two thirds of it,
// 2 s, still extends in time.
const longVisibility = 3 * time.Second

// TestSQSLongTaskNotRedelivered: a task running 10s with a 3s visibility
// timeout (over 3 timeouts) is never redelivered while it runs: the agent
// extends the message's visibility (and its lease) before it lapses.
func TestSQSLongTaskNotRedelivered(t *testing.T) {
	// Parallel: it waits on a 10 s task, on its own queue and Redis prefix.
	t.Parallel()
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	led := newSQSLedger(t)
	// Two agents polling, so a lapse would be picked up at once.
	var agents []*proc
	for _, inst := range []string{"agent-a", "agent-b"} {
		agents = append(agents, startProc(t, sqsAgentConfig{instance: inst, workers: 2, queueURL: fq.url,
			visibility: longVisibility, redisAddr: testenv.RedisAddr(t), prefix: prefix, ledger: led}.yaml(), fq.env...))
	}
	ids := fq.send(t, sqsTaskBody("long-1", "longer"))
	eventually(t, 60*time.Second, "long-1 done and deleted", func() bool {
		rec, _ := sqsTaskRecord(t, rc, prefix, "long-1")
		return rec.Status == state.StatusDone && fq.drained(t)
	})
	rec, _ := sqsTaskRecord(t, rc, prefix, "long-1")
	if rec.Outcome != "succeeded" || rec.Attempts != 1 {
		t.Errorf("record = %+v, want succeeded in 1 attempt", rec)
	}
	if ran := rec.FinishedAt.Sub(rec.StartedAt); ran < 3*longVisibility {
		t.Errorf("task ran %v; the test needs it to outlast 3 visibility timeouts", ran)
	}
	v, _ := fq.srv.Queue("tasks")
	if len(v.History) != 1 || v.History[0].ID != ids[0] || v.History[0].ReceiveCount != 1 || v.History[0].State != "deleted" {
		t.Errorf("message history %+v, want received once, deleted", v.History)
	}
	if n := led.counts(t)["long-1"]; n != 1 {
		t.Errorf("long-1 executed %d times, want once", n)
	}
	ext := 0
	for _, c := range fq.srv.Calls("ChangeMessageVisibility", "ChangeMessageVisibilityBatch") {
		if c.Status == 200 {
			ext++
		}
	}
	if ext < 3 {
		t.Errorf("%d visibility extensions for a 10s task at %v visibility, want at least 3", ext, longVisibility)
	}
	for _, a := range agents {
		if o := sqsOutcomes(a); o["duplicate"] != 0 {
			t.Errorf("outcomes %v: a duplicate means the message came back while running", o)
		}
	}
}

// TestSQSEnqueueAndStatusCLI: `autodiag enqueue --queue-url` sends the task
// with SendMessage (retried by the SDK when throttled, failing with the
// throttle once its attempts are spent), the agent runs it, and `autodiag
// status --json` shows the fleet from Redis: the instance, the task in
// flight with its age, then the outcome.
func TestSQSEnqueueAndStatusCLI(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	led := newSQSLedger(t)
	cfg := sqsAgentConfig{instance: "agent-s", workers: 2, queueURL: fq.url, visibility: 2 * time.Second,
		redisAddr: testenv.RedisAddr(t), prefix: prefix, ledger: led}

	// The agent's first ReceiveMessage is throttled twice: the SDK retries
	// it under one invocation id.
	fq.srv.InjectFault(sqsfake.Fault{Op: "ReceiveMessage", Kind: sqsfake.FaultThrottle, Count: 2})
	a := startProc(t, cfg.yaml(), fq.env...)
	// A call is logged when it ends: the third attempt is a 2s long poll.
	eventually(t, 20*time.Second, "three receive attempts", func() bool { return len(fq.srv.Calls("ReceiveMessage")) >= 3 })
	recv := fq.srv.Calls("ReceiveMessage")
	if len(recv) < 3 || recv[0].ErrorCode != "ThrottlingException" || recv[1].ErrorCode != "ThrottlingException" {
		t.Fatalf("receive calls %+v, want two throttled", recv)
	}
	for i, c := range recv[:3] {
		if c.InvocationID != recv[0].InvocationID || c.Attempt != i+1 {
			t.Errorf("receive %d: invocation %s attempt %d, want one SDK call retried (attempt %d)", i, c.InvocationID, c.Attempt, i+1)
		}
	}

	// enqueue, throttled twice: the third attempt succeeds.
	fq.srv.InjectFault(sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultThrottle, Count: 2})
	cfgPath := sqsWriteConfig(t, cfg.yaml())
	code, stdout, stderr := runCLI(t, fq.awsEnv(), "enqueue", "--config", cfgPath, "--queue-url", fq.url,
		"--host", "web-1", "--diagnostic", "gate", "--id", "cli-1", "--severity", "high")
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, stderr)
	}
	var sent struct {
		MessageID string `json:"message_id"`
		ID        string `json:"id"`
	}
	if err := json.Unmarshal([]byte(stdout), &sent); err != nil || sent.ID != "cli-1" || sent.MessageID == "" {
		t.Fatalf("enqueue output %q: %v", stdout, err)
	}
	sends := fq.srv.Calls("SendMessage")
	if len(sends) != 3 || sends[2].Status != 200 || sends[0].InvocationID != sends[2].InvocationID {
		t.Fatalf("SendMessage calls %+v, want 2 throttled attempts and a third that succeeds, one invocation", sends)
	}
	if len(sends[2].MessageIDs) != 1 || sends[2].MessageIDs[0] != sent.MessageID {
		t.Errorf("enqueue printed message id %s, the queue got %v", sent.MessageID, sends[2].MessageIDs)
	}

	eventually(t, 20*time.Second, "cli-1 running", func() bool { return led.counts(t)["cli-1"] == 1 })
	fv := sqsFleetStatus(t, fq, cfg)
	if len(fv.Instances) != 1 || fv.Instances[0].ID != "agent-s" || fv.Instances[0].State != "running" {
		t.Fatalf("status --json instances %+v, want agent-s running", fv.Instances)
	}
	if tk := fv.Instances[0].Tasks; len(tk) != 1 || tk[0].TaskID != "cli-1" || tk[0].Age == "" {
		t.Errorf("status --json in flight %+v, want cli-1 with an age", tk)
	}

	led.open()
	eventually(t, 20*time.Second, "cli-1 succeeded", func() bool { return sqsOutcomes(a)["succeeded"] == 1 })
	fv = sqsFleetStatus(t, fq, cfg)
	if len(fv.Instances) != 1 || len(fv.Instances[0].Tasks) != 0 {
		t.Errorf("status --json after the task: %+v, want agent-s with nothing in flight", fv.Instances)
	}
	found := false
	for _, e := range fv.Recent {
		found = found || e.TaskID == "cli-1" && e.Outcome == "succeeded" && e.InstanceID == "agent-s"
	}
	if !found || fv.RecentOutcomes["succeeded"] != 1 {
		t.Errorf("status --json recent %+v / %v, want cli-1 succeeded on agent-s", fv.Recent, fv.RecentOutcomes)
	}
	if rec, _ := sqsTaskRecord(t, rc, prefix, "cli-1"); rec.Outcome != "succeeded" || rec.Host != "web-1" {
		t.Errorf("record %+v", rec)
	}
	eventually(t, 10*time.Second, "the message deleted", func() bool { return fq.drained(t) })

	// Throttled for good: the SDK's 3 attempts are spent and enqueue fails
	// with the throttle, exit 1.
	fq.srv.ResetLog()
	id := fq.srv.InjectFault(sqsfake.Fault{Op: "SendMessage", Kind: sqsfake.FaultThrottle})
	code, _, stderr = runCLI(t, fq.awsEnv(), "enqueue", "--config", cfgPath, "--queue-url", fq.url,
		"--host", "web-1", "--diagnostic", "gate", "--id", "cli-2")
	fq.srv.RemoveFault(id)
	if code != 1 || !strings.Contains(stderr, "ThrottlingException") {
		t.Errorf("enqueue throttled for good: exit %d, stderr %q; want 1 naming ThrottlingException", code, stderr)
	}
	sends = fq.srv.Calls("SendMessage")
	if len(sends) != 3 {
		t.Errorf("%d SendMessage attempts, want the SDK default of 3", len(sends))
	} else {
		// Information, not an assertion: the standard retryer waits
		// rand[0,1) × min(1s × 2^i, 20s) after the i-th throttle.
		t.Logf("throttled SendMessage attempts %v and %v apart", sends[1].Time.Sub(sends[0].Time).Round(time.Millisecond),
			sends[2].Time.Sub(sends[1].Time).Round(time.Millisecond))
	}

	sqsDrainAll(t, a)
}

// TestSQSRejectedMessages: invalid task messages are never executed. With
// queue.dlq_url they go to the DLQ with the reason and their original
// attributes as message attributes, and are deleted from the task queue;
// without it they are left to the queue's redrive policy, which moves them
// after maxReceiveCount deliveries.
func TestSQSRejectedMessages(t *testing.T) {
	t.Run("dlq_url", func(t *testing.T) {
		rc, prefix := sqsRedis(t)
		fq := newSQSFake(t, "tasks")
		dlqURL, err := fq.srv.CreateQueue("tasks-dlq", nil)
		if err != nil {
			t.Fatal(err)
		}
		led := newSQSLedger(t)
		a := startProc(t, sqsAgentConfig{instance: "agent-d", workers: 2, queueURL: fq.url, dlqURL: dlqURL,
			redisAddr: testenv.RedisAddr(t), prefix: prefix, ledger: led}.yaml(), fq.env...)
		bad := map[string]string{ // body → reason
			`{"id":"bad-1","host":"$(reboot)","diagnostic":"mark"}`: "invalid_host",
			`not json`: "malformed_json",
			`{"id":"bad-3","host":"web-1","diagnostic":"rm-rf"}`: "unknown_diagnostic",
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for body := range bad {
			if _, err := fq.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(fq.url), MessageBody: aws.String(body),
				MessageAttributes: map[string]types.MessageAttributeValue{
					"source": {DataType: aws.String("String"), StringValue: aws.String("zabbix")}}}); err != nil {
				t.Fatal(err)
			}
		}
		fq.send(t, sqsTaskBody("ok-1", "mark"))
		eventually(t, 30*time.Second, "task queue drained, DLQ holding the 3 bad messages", func() bool {
			_, _, _, st, _ := fq.srv.Stats("tasks-dlq")
			return fq.drained(t) && st.Sent == len(bad)
		})
		v, _ := fq.srv.Queue("tasks-dlq")
		if len(v.Messages) != len(bad) {
			t.Errorf("DLQ holds %d messages, want %d", len(v.Messages), len(bad))
		}
		for _, m := range v.Messages {
			want, ok := bad[m.Body]
			if !ok {
				t.Errorf("DLQ holds unexpected body %q", m.Body)
				continue
			}
			reason := m.Attributes["autodiag-reject-reason"].StringValue
			if !strings.HasPrefix(reason, want+": ") {
				t.Errorf("DLQ message %q: reason %q, want %s: ...", m.Body, reason, want)
			}
			if src := m.Attributes["source"].StringValue; src != "zabbix" {
				t.Errorf("DLQ message %q: original attribute source = %q, want zabbix", m.Body, src)
			}
		}
		if c := led.counts(t); len(c) != 1 || c["ok-1"] != 1 {
			t.Errorf("ledger %v, want only ok-1 once", c)
		}
		if o := sqsOutcomes(a); o["rejected"] != len(bad) || o["succeeded"] != 1 {
			t.Errorf("outcomes %v, want %d rejected and 1 succeeded", o, len(bad))
		}
		// An invalid host never reaches Redis (validation comes first).
		if _, ok := sqsTaskRecord(t, rc, prefix, "bad-1"); ok {
			t.Error("a task record exists for the message with an invalid host")
		}
	})

	t.Run("redrive policy", func(t *testing.T) {
		_, prefix := sqsRedis(t)
		fq := newSQSFake(t, "tasks")
		if _, err := fq.srv.CreateQueue("redrive-dlq", nil); err != nil {
			t.Fatal(err)
		}
		url, err := fq.srv.CreateQueue("tasks-redriven", map[string]string{
			"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"2"}`, fq.srv.QueueARN("redrive-dlq"))})
		if err != nil {
			t.Fatal(err)
		}
		a := startProc(t, sqsAgentConfig{instance: "agent-p", workers: 2, queueURL: url, visibility: 2 * time.Second,
			redisAddr: testenv.RedisAddr(t), prefix: prefix}.yaml(), fq.env...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := fq.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url),
			MessageBody: aws.String(`{"id":"bad-r","host":"web-1","diagnostic":"rm-rf"}`)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the message moved to the DLQ by the redrive policy", func() bool {
			_, _, _, st, _ := fq.srv.Stats("redrive-dlq")
			return st.MovedIn == 1
		})
		v, _, _, st, _ := fq.srv.Stats("tasks-redriven")
		if v != 0 || st.Deleted != 0 || st.Received != 2 {
			t.Errorf("task queue: %d visible, stats %+v; want the message received twice, never deleted, moved", v, st)
		}
		// One outcome per message however often it is delivered.
		eventually(t, 10*time.Second, "both deliveries received", func() bool {
			return sqsMetric(a, "autodiag_tasks_received_total") == 2 && sqsMetric(a, "autodiag_tasks_inflight") == 0
		})
		if o := sqsOutcomes(a); o["rejected"] != 1 {
			t.Errorf("outcomes %v, want one rejected for two deliveries of one message", o)
		}
	})
}
