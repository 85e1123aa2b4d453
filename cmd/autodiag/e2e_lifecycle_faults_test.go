package main

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

// lcRepeat is n tasks of secs each.
func lcRepeat(n int, secs float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = secs
	}
	return out
}

func lcSQSLifecycle(l *lcLab, interval time.Duration) string {
	return "  sources: [signal, sqs]\n  queue_url: " + l.lcQURL + "\n" + fmt.Sprintf(lcLifecycleBase, interval)
}

func lcInflight(p *proc) float64 {
	v, _ := p.status()["inflight"].(float64)
	return v
}

func lcStatusCount(calls []lcCall, status int) int {
	n := 0
	for _, c := range calls {
		if c.Status == status {
			n++
		}
	}
	return n
}

// TestLifecycleIdleLongPollE2E: a trigger while the agent long-polls an
// empty task queue cancels that poll at once; nothing is received after.
func TestLifecycleIdleLongPollE2E(t *testing.T) {
	const total = 5
	l := lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second, notify: true})
	l.enqueue(lcRepeat(total, 0.05))
	p := startProc(t, l.config(4, lcSQSLifecycle(l, 250*time.Millisecond)), l.env()...)
	eventually(t, 30*time.Second, "every task done and the agent long-polling", func() bool {
		return lcEndedCount(p) == total && l.sqs.Pollers(lcTaskQueue) > 0
	})
	if _, err := l.asg.Terminate(lcMockInstance); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	trig, _ := lcFirstLog(t, p, "lifecycle trigger")
	f := lcCheckDrain(t, l, p, total, trig, false)
	if f.cancelledReceive == nil {
		t.Fatal("no long poll was in flight at the trigger, or it was not cancelled")
	}
	if n := len(p.logs(lcPollAbandoned)); n != 1 {
		t.Errorf("%d %q lines for the one poll abandoned; want 1", n, lcPollAbandoned)
	}
	f.report(t, "idle long poll + SQS notification", 250*time.Millisecond)
}

// TestLifecycleThrottledE2E: half of the heartbeats and completions are
// throttled; the action still never expires while work remains (the fake
// enforces a 3s-of-real-time heartbeat timeout over a longer drain) and is
// completed exactly once.
func TestLifecycleThrottledE2E(t *testing.T) {
	const total = 10
	interval := 500 * time.Millisecond
	l := lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second, notify: true})
	// The first completion attempt is always throttled, so the retry path
	// runs whatever the dice say; then half of every call is.
	l.asg.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "Throttling", Count: 1})
	for _, op := range []string{"RecordLifecycleActionHeartbeat", "CompleteLifecycleAction"} {
		l.asg.InjectFault(asgfake.Fault{Op: op, Code: "Throttling", Probability: 0.5})
	}
	l.enqueue(lcRepeat(total, 3))
	p := startProc(t, l.config(4, lcSQSLifecycle(l, interval)), l.env()...)
	eventually(t, 30*time.Second, "workers busy", func() bool { return lcInflight(p) >= 4 })
	if _, err := l.asg.Terminate(lcMockInstance); err != nil {
		t.Fatal(err)
	}
	// While the drain runs (its work lasts about 6s): the status drain
	// block, /readyz and the metrics tell an operator what is going on.
	eventually(t, 5*time.Second, "status: draining with heartbeats", func() bool {
		d, _ := p.status()["drain"].(map[string]any)
		lc, _ := d["lifecycle"].(map[string]any)
		hb, _ := lc["heartbeats"].(float64)
		return d["source"] == "sqs" && lc["hook"] == lcLabHook && hb >= 2 && d["remaining"].(float64) > 0
	})
	if code := p.getCode("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d while draining, want 503", code)
	}
	m := p.metrics()
	for _, want := range []string{"autodiag_drain_state 1", `autodiag_lifecycle_heartbeats_total{result="ok"}`, `autodiag_lifecycle_heartbeats_total{result="throttled"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics while draining lacks %s", want)
		}
	}
	if code := p.wait(90 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	trig, _ := lcFirstLog(t, p, "lifecycle trigger")
	f := lcCheckDrain(t, l, p, total, trig, true)
	if work := f.lastEnded.Sub(f.drainStarted); work <= l.realTTL() {
		t.Fatalf("the drain's work took %s, not longer than the hook's heartbeat timeout (%s): expiry was never at stake", lcMS(work), l.realTTL())
	}
	beats := l.asgRec.log("RecordLifecycleActionHeartbeat", "")
	completes := l.asgRec.log("CompleteLifecycleAction", "")
	if lcStatusCount(beats, http.StatusBadRequest) == 0 || lcStatusCount(completes, http.StatusBadRequest) == 0 {
		t.Errorf("heartbeats or completion never throttled: the faults did not apply")
	}
	f.report(t, "50% throttled heartbeats and completion", interval)
	t.Logf("REPORT throttled: heartbeat attempts %d (%d throttled), completion attempts %d (%d throttled)",
		len(beats), lcStatusCount(beats, http.StatusBadRequest), len(completes), lcStatusCount(completes, http.StatusBadRequest))
}

// TestLifecycleRestartMidDrainE2E: the agent is killed (-9) mid-drain and
// restarted on the same instance with the same Redis: it resumes the
// persisted drain, receives no new work, and completes the action exactly
// once before exiting 0.
func TestLifecycleRestartMidDrainE2E(t *testing.T) {
	const total = 10
	interval := 500 * time.Millisecond
	l := lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second, notify: true})
	l.enqueue(lcRepeat(total, 4))
	cfg := l.config(4, lcSQSLifecycle(l, interval))
	p := startProc(t, cfg, l.env()...)
	eventually(t, 30*time.Second, "workers busy", func() bool { return lcInflight(p) >= 4 })
	if _, err := l.asg.Terminate(lcMockInstance); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "a heartbeat of the drain", func() bool {
		return lcStatusCount(l.asgRec.log("RecordLifecycleActionHeartbeat", ""), http.StatusOK) > 0
	})
	p.signal(syscall.SIGKILL)
	if code := p.wait(10 * time.Second); code == 0 {
		t.Fatal("the killed agent exited 0")
	}
	killed := time.Now()
	if n := len(l.asgRec.log("CompleteLifecycleAction", "")); n != 0 {
		t.Fatalf("%d completion attempts before the kill: the drain was not mid-way", n)
	}

	p2 := startProc(t, cfg, l.env()...)
	if code := p2.wait(60 * time.Second); code != 0 {
		t.Fatalf("restarted agent: exit code %d, want 0", code)
	}
	if n := len(p2.logsWhere("msg", "drain resumed")); n != 1 {
		t.Fatalf("restarted agent did not resume the drain (%d lines)", n)
	}
	if n := len(p2.logsWhere("msg", "task interrupted")); n == 0 {
		t.Errorf("the killed agent's running tasks were not recovered as interrupted")
	}
	for _, c := range l.sqsRec.log("ReceiveMessage", lcTaskQueue) {
		if c.Start.After(killed) {
			t.Errorf("the restarted agent called ReceiveMessage on the task queue (%s after the kill)", lcMS(c.Start.Sub(killed)))
		}
	}
	var ok []lcCall
	for _, c := range l.asgRec.log("CompleteLifecycleAction", "") {
		if c.Status == http.StatusOK {
			ok = append(ok, c)
		}
	}
	if len(ok) != 1 {
		t.Fatalf("%d successful completions, want 1", len(ok))
	}
	act, _ := l.asg.Action(lcMockInstance)
	if act.EndReason != asgfake.EndCompleted || act.Completions != 1 {
		t.Errorf("lifecycle action in Auto Scaling: %+v, want completed once", act)
	}
	var after []lcCall
	for _, c := range l.asgRec.log("RecordLifecycleActionHeartbeat", "") {
		if c.Start.After(killed) {
			after = append(after, c)
			if !c.Start.Before(ok[0].Start) {
				t.Errorf("heartbeat after the completion")
			}
		}
	}
	if lcStatusCount(after, http.StatusOK) == 0 {
		t.Errorf("the restarted agent sent no heartbeat before completing")
	}
	lcCheckNotifications(t, l, ok[0].Start, 0)
	restarted, _ := lcFirstLog(t, p2, "ready")
	t.Logf("REPORT restart: kill→restarted ready %s; restarted ready→CompleteLifecycleAction %s; heartbeats after restart %d (%d ok)",
		lcMS(restarted.Sub(killed)), lcMS(ok[0].Start.Sub(restarted)), len(after), lcStatusCount(after, http.StatusOK))
}

// TestLifecycleTerminatedDuringDrainE2E: a drain started by POST /v1/drain
// on an instance still InService; Auto Scaling begins terminating it
// mid-drain (IMDS turns Terminated). The agent picks the action up,
// heartbeats it while work remains (the hook's timeout is shorter than the
// rest of the drain) and completes it once before exiting 0.
func TestLifecycleTerminatedDuringDrainE2E(t *testing.T) {
	// Parallel: it waits on a drain longer than the hook's heartbeat timeout,
	// on its own lab.
	t.Parallel()
	const total = 4
	interval := 250 * time.Millisecond
	var l *lcLab
	var p *proc
	lcScaledScene(t, func(k float64) bool {
		l = lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second})
		l.startIMDSMock(time.Duration(k * float64(3*time.Second)))
		l.enqueue(lcRepeat(total, k*3.5))
		p = startProc(t, l.config(2, "  sources: [signal, imds]\n  asg_name: "+lcLabASG+"\n  imds_poll_interval: 200ms\n"+
			fmt.Sprintf(lcLifecycleBase, interval)), l.env()...)
		eventually(t, 30*time.Second, "workers busy", func() bool { return lcInflight(p) >= 2 })
		// The drain must begin while IMDS still says InService.
		if l.isSynced() {
			return lcSceneSet(p, false)
		}
		code, _ := p.post("/v1/drain", "")
		if code != http.StatusAccepted {
			t.Fatalf("POST /v1/drain = %d", code)
		}
		return lcSceneSet(p, !l.isSynced())
	})
	if code := l.wait(p, 60*time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if n := len(p.logsWhere("msg", "lifecycle action during the drain")); n != 1 {
		t.Fatalf("the action was not picked up during the drain (%d lines)", n)
	}
	trig, line := lcFirstLog(t, p, "drain started")
	if line["source"] != "admin" {
		t.Fatalf("drain source %v, want admin", line["source"])
	}
	if work := lcCheckLateAction(t, l, p, total, trig); work <= l.realTTL() {
		t.Fatalf("the drain went on %s after IMDS said Terminated, not longer than the hook's heartbeat timeout (%s): expiry was never at stake", lcMS(work), l.realTTL())
	}
}

// lcCheckLateAction checks the drain and returns how long its work went on after the action began.
func lcCheckLateAction(t *testing.T, l *lcLab, p *proc, total int, trig time.Time) time.Duration {
	facts := lcCheckDrain(t, l, p, total, trig, true)
	if len(facts.heartbeats) == 0 {
		t.Errorf("no heartbeat for the action that began during the drain")
	}
	facts.report(t, "Terminated during an admin drain", 250*time.Millisecond)
	return facts.lastEnded.Sub(facts.event)
}

// TestLifecycleNotifiedDuringDrainE2E: with the sqs source, an admin drain
// (no lifecycle action) keeps watching the notification queue; Auto Scaling
// starting to terminate the instance mid-drain gets heartbeats, exactly one
// completion after the work, and its notification deleted.
func TestLifecycleNotifiedDuringDrainE2E(t *testing.T) {
	// Parallel: it waits on a long drain, on its own lab.
	t.Parallel()
	const total = 4
	interval := 250 * time.Millisecond
	l := lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second, notify: true})
	l.enqueue(lcRepeat(total, 3.5))
	p := startProc(t, l.config(2, "  sources: [signal, sqs]\n  queue_url: "+l.lcQURL+"\n  asg_name: "+lcLabASG+"\n"+
		fmt.Sprintf(lcLifecycleBase, interval)), l.env()...)
	eventually(t, 30*time.Second, "workers busy", func() bool { return lcInflight(p) >= 2 })
	if code, _ := p.post("/v1/drain", ""); code != http.StatusAccepted {
		t.Fatalf("POST /v1/drain = %d", code)
	}
	eventually(t, 10*time.Second, "draining", func() bool { return p.getCode("/readyz") == http.StatusServiceUnavailable })
	if _, err := l.asg.Terminate(lcMockInstance); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	if n := len(p.logsWhere("msg", "lifecycle action during the drain")); n != 1 {
		t.Fatalf("the notification was not picked up during the drain (%d lines)", n)
	}
	trig, line := lcFirstLog(t, p, "drain started")
	if line["source"] != "admin" {
		t.Fatalf("drain source %v, want admin", line["source"])
	}
	facts := lcCheckDrain(t, l, p, total, trig, true)
	if len(facts.heartbeats) == 0 {
		t.Errorf("no heartbeat for the action that began during the drain")
	}
	lcCheckNotifications(t, l, facts.complete, 0)
}
