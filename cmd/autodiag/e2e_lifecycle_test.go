package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// The lifecycle drain with the real binary: an instance leaving its Auto
// Scaling group (IMDS Terminated, SIGTERM on an instance already in
// Terminating:Wait, an SQS lifecycle notification) stops intake at once,
// finishes what it received, heartbeats while work remains and completes
// the lifecycle action exactly once, after the last task, then exits 0.
// Measured gaps are logged as "REPORT" lines (go test -v -run Lifecycle).

// lcTaskSecs are n task durations between 50 and 500 ms, reproducible.
func lcTaskSecs(n int) []float64 {
	r := rand.New(rand.NewPCG(5, 5))
	out := make([]float64, n)
	for i := range out {
		out[i] = 0.05 + r.Float64()*0.45
	}
	return out
}

func lcEndedCount(p *proc) int { return len(p.logs("task ended")) }

// lcDrainFacts is what lcCheckDrain measured.
type lcDrainFacts struct {
	event, trigger, drainStarted, lastEnded, complete time.Time
	heartbeats                                        []lcCall
	cancelledReceive                                  *lcCall
}

// lcCheckDrain asserts the drain contract on what the fakes and the agent's
// log recorded, for an agent that has exited. trigger is when the agent
// observed the trigger (its own log line).
// lcLateArrivals names the calls of cs that reached a fake after at. A
// request the agent sent before one of its log lines can reach the fake
// after it, by any delay a loaded machine adds (the recorders time a call
// when the fake's handler runs), so no margin of wall-clock time separates
// "sent before" from "sent after". Order does: the agent's receive loop and
// each heartbeat loop send one request at a time (the receive loop has
// more in flight only with more workers than queue.batch_size, which these
// agents do not have), so at most one of a loop's requests — the one in
// flight at that instant — arrives after it; a second proves a request was
// sent after it.
func lcLateArrivals(cs []lcCall, at time.Time) []string {
	var late []string
	for _, c := range cs {
		if c.Start.After(at) {
			late = append(late, fmt.Sprintf("+%s (gone=%v status=%d)", lcMS(c.Start.Sub(at)), c.Gone, c.Status))
		}
	}
	return late
}

func lcCheckDrain(t *testing.T, l *lcLab, p *proc, total int, trigger time.Time, midRun bool) lcDrainFacts {
	t.Helper()
	f := lcDrainFacts{trigger: trigger, event: l.event()}
	f.drainStarted, _ = lcFirstLog(t, p, "drain started")

	// Intake: no ReceiveMessage on the task queue starts after the trigger
	// (the one in flight at it may reach the fake after the trigger's log
	// line: lcLateArrivals); the one in flight ends only by being aborted,
	// or by an answer that came within the agent's receive grace — whose
	// messages the agent must then take like any other (checked below:
	// every received task ended). A call the drain aborted ends at the
	// fake after the trigger's line (the line comes before the abort);
	// one answered just before the trigger can too (the recorder notes
	// the end after the answer is written), so only the aborted one is
	// singled out.
	receives := l.sqsRec.log("ReceiveMessage", lcTaskQueue)
	if late := lcLateArrivals(receives, trigger); len(late) > 1 {
		t.Errorf("%d ReceiveMessage calls on the task queue arrived after the trigger, want at most the one in flight at it: %v", len(late), late)
	}
	for _, c := range receives {
		if !c.End.After(trigger) {
			continue
		}
		switch {
		case c.Gone && c.Status == 0:
			if f.cancelledReceive != nil {
				t.Errorf("two ReceiveMessage calls aborted at the trigger")
			}
			f.cancelledReceive = &c
		case c.Status == http.StatusOK:
			if c.End.After(f.drainStarted) {
				t.Logf("the ReceiveMessage in flight at the trigger was answered %s after it, within the receive grace", lcMS(c.End.Sub(trigger)))
			}
		default:
			t.Errorf("ReceiveMessage in flight at the trigger ended %s after it, neither aborted nor answered (status %d)", lcMS(c.End.Sub(trigger)), c.Status)
		}
	}

	// Every received task ended, once, and the queue agrees; but for the
	// answer to the poll in flight at the trigger when the agent abandoned
	// that poll (it says so): SQS can still answer a poll before it sees
	// the connection close, and those messages stay in flight until their
	// visibility timeout.
	ended := p.logs("task ended")
	abandoned := lcAbandonedAnswer(t, l, p, ended, trigger)
	received := -len(abandoned)
	for _, c := range l.sqs.Calls("ReceiveMessage") {
		if c.Queue == lcTaskQueue {
			received += len(c.MessageIDs)
		}
	}
	seen := map[string]bool{}
	succeeded := 0
	for _, e := range ended {
		id, _ := e["task_id"].(string)
		if seen[id] {
			t.Errorf("task %s ended twice", id)
		}
		seen[id] = true
		switch e["outcome"] {
		case "succeeded":
			succeeded++
		case "released":
		default:
			t.Errorf("task %s ended %v (%v), want succeeded or released", id, e["outcome"], e["reason"])
		}
		if at := lcLogTime(t, e); at.After(f.lastEnded) {
			f.lastEnded = at
		}
	}
	if len(ended) != received || received == 0 {
		t.Errorf("%d tasks received, %d ended", received, len(ended))
	}
	if midRun && received >= total {
		t.Errorf("all %d tasks were received: the trigger was not mid-run", total)
	}
	qv, _ := l.sqs.Queue(lcTaskQueue)
	if qv.InFlight != len(abandoned) || qv.Stats.Deleted != succeeded || qv.Visible+qv.InFlight+qv.Stats.Deleted != total {
		t.Errorf("task queue after exit: %d in flight (%d abandoned), %d visible, %d deleted; %d succeeded of %d",
			qv.InFlight, len(abandoned), qv.Visible, qv.Stats.Deleted, succeeded, total)
	}

	// Exactly one CompleteLifecycleAction, after the last task ended.
	var ok []lcCall
	for _, c := range l.asgRec.log("CompleteLifecycleAction", "") {
		if c.Status == http.StatusOK {
			ok = append(ok, c)
		}
	}
	if len(ok) != 1 {
		t.Fatalf("%d successful CompleteLifecycleAction calls, want 1", len(ok))
	}
	f.complete = ok[0].Start
	want := asgfake.ResultContinue
	if !bytes.Contains(ok[0].Body, []byte("LifecycleActionResult="+want)) {
		t.Errorf("completion %s, want %s", ok[0].Body, want)
	}
	if f.complete.Before(f.lastEnded) {
		t.Errorf("CompleteLifecycleAction %s before the last task ended", lcMS(f.lastEnded.Sub(f.complete)))
	}
	act, found := l.asg.Action(lcMockInstance)
	if !found || act.EndReason != asgfake.EndCompleted || act.Completions != 1 || act.Result != want {
		t.Errorf("lifecycle action in Auto Scaling: %+v, want completed once with %s", act, want)
	}

	// Heartbeats: while work remained (they stop before the supervisor
	// logs "drain work ended") or while a failed completion is retried,
	// never after completion, and never a gap the hook's heartbeat timeout
	// could fall into.
	workEnded, _ := lcFirstLog(t, p, "drain work ended")
	var firstFailedComplete time.Time
	for _, c := range l.asgRec.log("CompleteLifecycleAction", "") {
		if c.Status != http.StatusOK {
			firstFailedComplete = c.Start
			break
		}
	}
	prev := f.drainStarted
	if f.event.After(prev) {
		prev = f.event // the action began during the drain
	}
	beats := l.asgRec.log("RecordLifecycleActionHeartbeat", "")
	// A heartbeat sent before the completion, or before the drain's work
	// ended, can reach the fake after it (lcLateArrivals).
	if late := lcLateArrivals(beats, f.complete); len(late) > 1 {
		t.Errorf("%d heartbeats arrived after the completion, want at most the one in flight at it: %v", len(late), late)
	}
	var beforeRetry []lcCall
	for _, c := range beats {
		if firstFailedComplete.IsZero() || c.Start.Before(firstFailedComplete) {
			beforeRetry = append(beforeRetry, c)
		}
	}
	if late := lcLateArrivals(beforeRetry, workEnded); len(late) > 1 {
		t.Errorf("%d heartbeats arrived after the drain's work ended, with no completion being retried; want at most the one in flight: %v", len(late), late)
	}
	for _, c := range beats {
		if c.Status != http.StatusOK {
			continue
		}
		if gap := c.Start.Sub(prev); gap >= l.realTTL() {
			t.Errorf("%s without a heartbeat (hook heartbeat timeout %s of real time)", lcMS(gap), l.realTTL())
		}
		prev = c.Start
		f.heartbeats = append(f.heartbeats, c)
	}

	// DrainSeconds for a CloudWatch alarm, by Auto Scaling group: put at
	// once when a drain with work begins (a drain with nothing left to wait
	// for ends before it matters).
	cw := l.cwRec.log("PutMetricData", "")
	if midRun && len(cw) == 0 {
		t.Errorf("no PutMetricData while draining")
	}
	for _, c := range cw {
		for _, want := range []string{"DrainSeconds", "AutoScalingGroupName", lcLabASG} {
			if !bytes.Contains(c.Body, []byte(want)) {
				t.Errorf("PutMetricData without %q", want)
			}
		}
	}
	if n := len(p.logs("drained")); n != 1 {
		t.Errorf("%d drained log lines, want 1", n)
	}
	return f
}

// report logs the measured gaps, for a reader judging heartbeat timing.
func (f lcDrainFacts) report(t *testing.T, name string, interval time.Duration) {
	t.Helper()
	var gaps []time.Duration
	for i := 1; i < len(f.heartbeats); i++ {
		gaps = append(gaps, f.heartbeats[i].Start.Sub(f.heartbeats[i-1].Start))
	}
	first := "none"
	if len(f.heartbeats) > 0 {
		first = lcMS(f.heartbeats[0].Start.Sub(f.drainStarted))
	}
	inflight := "none in flight"
	if f.cancelledReceive != nil {
		inflight = "in-flight long poll cancelled " + lcMS(f.cancelledReceive.End.Sub(f.trigger)) + " after the trigger"
	}
	seen := "n/a"
	switch {
	case f.event.IsZero():
	case f.event.After(f.trigger):
		seen = "n/a (the action began " + lcMS(f.event.Sub(f.trigger)) + " into the drain)"
	default:
		seen = lcMS(f.trigger.Sub(f.event))
	}
	t.Logf("REPORT %s: event→agent trigger %s; trigger→intake stopped (drain started) %s (%s); drain work %s; last task end→CompleteLifecycleAction %s; "+
		"heartbeats %d (first %s after drain start; intervals %s, configured %s)",
		name, seen, lcMS(f.drainStarted.Sub(f.trigger)), inflight, lcMS(f.lastEnded.Sub(f.drainStarted)), lcMS(f.complete.Sub(f.lastEnded)),
		len(f.heartbeats), first, lcSummary(gaps), interval)
}

const lcLifecycleBase = `  hook_name: drain-hook
  heartbeat_interval: %s
  drain_timeout: 1m
`

func TestLifecycleDrainE2E(t *testing.T) {
	// Parallel: it waits on drains and heartbeats, on its own labs.
	t.Parallel()
	const total = 200
	const interval = 250 * time.Millisecond

	t.Run("imds", func(t *testing.T) {
		var l *lcLab
		var p *proc
		n := total
		lcScaledScene(t, func(k float64) bool {
			// The queue holds more than the agent runs before IMDS says
			// Terminated, however the scene is scaled.
			n = int(k * total)
			l = lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second})
			l.startIMDSMock(time.Duration(k * float64(4*time.Second)))
			l.enqueue(lcTaskSecs(n))
			p = startProc(t, l.config(4, "  sources: [signal, imds]\n  asg_name: "+lcLabASG+"\n  imds_poll_interval: 200ms\n"+
				fmt.Sprintf(lcLifecycleBase, interval)), l.env()...)
			if code := l.wait(p, 90*time.Second); code != 0 {
				t.Fatalf("exit code %d, want 0", code)
			}
			// Mid-run: a task ended before the trigger. The mock's delay
			// counts from its own start, so an agent that started after it
			// had passed drained at its first poll.
			trig, _ := lcFirstLog(t, p, "lifecycle trigger")
			return slices.ContainsFunc(p.logs("task ended"), func(e map[string]any) bool { return lcLogTime(t, e).Before(trig) })
		})
		trig, line := lcFirstLog(t, p, "lifecycle trigger")
		if line["source"] != "imds" {
			t.Fatalf("trigger source %v, want imds", line["source"])
		}
		f := lcCheckDrain(t, l, p, n, trig, true)
		f.report(t, "imds Terminated", interval)
	})

	t.Run("sigterm", func(t *testing.T) {
		// The watcher polls once at start (InService) and then not for an
		// hour: SIGTERM arrives first, and the agent's probe finds
		// Terminated. No asg_name: the group comes from
		// DescribeAutoScalingInstances.
		var l *lcLab
		var p *proc
		n := total
		lcScaledScene(t, func(k float64) bool {
			n = int(k * total)
			l = lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second})
			l.startIMDSMock(time.Duration(k * float64(3*time.Second)))
			l.enqueue(lcTaskSecs(n))
			p = startProc(t, l.config(4, "  sources: [signal, imds]\n  imds_poll_interval: 1h\n"+
				fmt.Sprintf(lcLifecycleBase, interval)), l.env()...)
			eventually(t, 30*time.Second, "IMDS Terminated and tasks running, or the watcher's trigger", func() bool {
				return l.isSynced() && lcEndedCount(p) >= 20 || len(p.logs("lifecycle trigger")) > 0
			})
			// The mock's delay counts from its own start: an agent that
			// started after it had passed saw Terminated at its first poll.
			return lcSceneSet(p, len(p.logs("lifecycle trigger")) == 0)
		})
		p.signal(syscall.SIGTERM)
		if code := l.wait(p, 90*time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		if n := len(p.logs("lifecycle trigger")); n != 0 {
			t.Fatalf("the watcher fired (%d) before the signal; the scenario needs the probe", n)
		}
		trig, _ := lcFirstLog(t, p, "signal received: draining")
		f := lcCheckDrain(t, l, p, n, trig, true)
		f.event = time.Time{} // the signal is the event
		if n := len(l.asgRec.log("DescribeAutoScalingInstances", "")); n == 0 {
			t.Errorf("the group was not resolved with DescribeAutoScalingInstances")
		}
		f.report(t, "SIGTERM + IMDS probe", interval)
	})

	t.Run("sqs", func(t *testing.T) {
		l := lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second, notify: true})
		// Another instance's notification waits on the shared queue first.
		if _, err := l.asg.Terminate(lcLabOther); err != nil {
			t.Fatal(err)
		}
		l.enqueue(lcTaskSecs(total))
		p := startProc(t, l.config(4, "  sources: [signal, sqs]\n  queue_url: "+l.lcQURL+"\n"+
			fmt.Sprintf(lcLifecycleBase, interval)), l.env()...)
		eventually(t, 30*time.Second, "tasks running", func() bool { return lcEndedCount(p) >= 20 })
		if _, err := l.asg.Terminate(lcMockInstance); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(90 * time.Second); code != 0 {
			t.Fatalf("exit code %d, want 0", code)
		}
		trig, line := lcFirstLog(t, p, "lifecycle trigger")
		if line["source"] != "sqs" {
			t.Fatalf("trigger source %v, want sqs", line["source"])
		}
		f := lcCheckDrain(t, l, p, total, trig, true)
		lcCheckNotifications(t, l, f.complete, 1)
		f.report(t, "SQS lifecycle notification", interval)
	})
}

// lcScaledScene sets up a scene whose timing is counted from when
// ec2-metadata-mock started (it turns Terminated a delay after its own
// start): set reports, with the scene's times scaled by k, whether the
// agent got where the scene needs it before the mock's delay ran out. A
// loaded machine can start the agent too late for the first scale; the
// scene is then set again with every time doubled, and t fails only if
// that is too slow as well.
func lcScaledScene(t *testing.T, set func(k float64) bool) {
	t.Helper()
	for _, k := range []float64{1, 2, 4} {
		if set(k) {
			return
		}
		t.Logf("the agent was too slow for the scene at scale %g (a loaded machine); setting it again with its times doubled", k)
	}
	t.Fatal("the agent was too slow for the scene even with its times scaled by 4")
}

// lcSceneSet is ok; an agent whose scene failed is killed first, so that
// it takes no more work from the lab it shares nothing with afterwards.
func lcSceneSet(p *proc, ok bool) bool {
	if !ok {
		p.Kill()
	}
	return ok
}

// lcCheckNotifications: the other instance's notifications (wantOther)
// stay on the queue, never deleted; ours is deleted, after the completion.
func lcCheckNotifications(t *testing.T, l *lcLab, complete time.Time, wantOther int) {
	t.Helper()
	qv, _ := l.sqs.Queue(lcNotifyQueue)
	var mine, other int
	for _, m := range qv.History {
		switch {
		case bytes.Contains([]byte(m.Body), []byte(lcLabOther)):
			other++
			if m.State == "deleted" {
				t.Errorf("the other instance's notification was deleted")
			}
		case m.State == "deleted":
			mine++
		default:
			t.Errorf("notification %s is %s: %s", m.ID, m.State, m.Body)
		}
	}
	if other != wantOther || mine != 1 {
		t.Errorf("lifecycle queue: %d other-instance notifications left, %d of ours deleted; want %d and 1", other, mine, wantOther)
	}
	for _, c := range l.sqsRec.log("DeleteMessage", lcNotifyQueue) {
		if c.Start.Before(complete) {
			t.Errorf("a lifecycle notification was deleted %s before the completion", lcMS(complete.Sub(c.Start)))
		}
	}
}

// lcPollAbandoned is the agent's line for a task poll it abandoned as its
// intake stopped, the answer not begun within its receive grace.
const lcPollAbandoned = "task poll abandoned as intake stopped; messages SQS gave it come back after their visibility timeout"

// lcAbandonedAnswer returns the ids of the messages received from the task
// queue that never ended (none in ended), when they are all the answer to
// one ReceiveMessage that ended after the trigger, the agent logged that it
// abandoned a poll, and they are still in flight, received once: the answer
// SQS gave a poll the agent had given up. Otherwise it returns none, and
// the caller's counts fail.
func lcAbandonedAnswer(t *testing.T, l *lcLab, p *proc, ended []map[string]any, trigger time.Time) []string {
	t.Helper()
	endedTask := map[string]bool{}
	for _, e := range ended {
		id, _ := e["task_id"].(string)
		endedTask[id] = true
	}
	v, _ := l.sqs.Queue(lcTaskQueue)
	msgs := map[string]sqsfake.MessageView{}
	for _, m := range v.History {
		msgs[m.ID] = m
	}
	byInv := map[string]lcCall{}
	for _, c := range l.sqsRec.log("ReceiveMessage", lcTaskQueue) {
		byInv[c.Invocation] = c
	}
	var out []string
	calls := 0
	for _, c := range l.sqs.Calls("ReceiveMessage") {
		if c.Queue != lcTaskQueue {
			continue
		}
		var missing []string
		for _, id := range c.MessageIDs {
			var task struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal([]byte(msgs[id].Body), &task)
			if !endedTask[task.ID] {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			continue
		}
		calls++
		if len(missing) != len(c.MessageIDs) || !byInv[c.InvocationID].End.After(trigger) {
			return nil // a taken answer left a task unended: a real loss
		}
		for _, id := range missing {
			if m := msgs[id]; m.State != "inflight" || m.ReceiveCount != 1 {
				return nil
			}
		}
		out = append(out, missing...)
	}
	if calls != 1 || len(p.logs(lcPollAbandoned)) == 0 {
		return nil
	}
	t.Logf("%d messages answered to the task poll the agent abandoned at the trigger: in flight until their visibility timeout", len(out))
	return out
}
