package main

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/imdsmock"
	"github.com/autodiag/autodiag/internal/harness"
)

// The lifecycle scenes: an Auto Scaling fake served by this process whose
// clock runs 10× faster than the wall clock, so that the shortest hook
// heartbeat timeout AWS allows (30 s) expires in 3 s of real time; its
// lifecycle notifications go to a lifecycle queue on the SQS fake, which
// the agent reads (lifecycle source sqs).
const (
	lcScale    = 10
	lcHookTTL  = 30 * time.Second // on the fake's clock
	lcInstance = "i-1234567890abcdef0"
	lcGroup    = "asg-chaos"
	lcHook     = "drain-hook"
	lcInterval = 500 * time.Millisecond
)

type lcLab struct {
	asg    *harness.ASG
	tasks  string // task queue URL
	notify string // lifecycle queue URL
	yaml   string
	redis  *harness.Redis
	led    *harness.Ledger
	clock  harness.FastClock // the Auto Scaling fake's
}

// real turns a time of the fake's clock into wall-clock time.
func (lc *lcLab) real(t time.Time) time.Time { return lc.clock.Real(t) }

// newLifecycleLab: the fake's clock runs scale times the wall clock;
// lifecycleYAML is the agent's lifecycle section ("" = the sqs source).
func (l *lab) newLifecycleLab(name string, scale float64, lifecycleYAML string) (*lcLab, error) {
	lc := &lcLab{}
	var err error
	if lc.redis, err = l.StartRedis(name); err != nil {
		return nil, err
	}
	if lc.led, err = l.NewLedger(name); err != nil {
		return nil, err
	}
	if lc.tasks, err = l.SQS.CreateQueue(name+"-tasks", map[string]string{"VisibilityTimeout": "60"}); err != nil {
		return nil, err
	}
	if lc.notify, err = l.SQS.CreateQueue(name+"-lifecycle", nil); err != nil {
		return nil, err
	}
	lc.clock = harness.NewFastClock(scale)
	lc.asg, err = l.startASG(5, lc.clock.Now, lc.notify)
	if err != nil {
		return nil, err
	}
	if err := lc.asg.AddInstance(lcGroup, lcInstance); err != nil {
		return nil, fmt.Errorf("asgfake: %w", err)
	}
	if err := lc.asg.PutHook(asgfake.Hook{Group: lcGroup, Name: lcHook, HeartbeatTimeout: lcHookTTL, DefaultResult: asgfake.ResultAbandon}); err != nil {
		return nil, fmt.Errorf("asgfake: %w", err)
	}

	lc.yaml = harness.AgentConfig{Instance: lcInstance, Workers: 4, QueueURL: lc.tasks, Visibility: 60 * time.Second,
		RedisAddr: lc.redis.Addr, Prefix: name + ":", Ledger: lc.led}.YAML()
	if lifecycleYAML != "" {
		lc.yaml += lifecycleYAML
		return lc, nil
	}
	lc.yaml += fmt.Sprintf("lifecycle:\n  sources: [signal, sqs]\n  queue_url: %s\n  hook_name: %s\n  heartbeat_interval: %s\n  drain_timeout: 1m\n",
		lc.notify, lcHook, lcInterval)
	return lc, nil
}

// startASG serves an Auto Scaling fake with group lcGroup whose
// lifecycle notifications go to the SQS queue notifyURL.
func (l *lab) startASG(seed uint64, now func() time.Time, notifyURL string) (*harness.ASG, error) {
	asg, err := l.StartASG(nil, asgfake.Options{Seed: seed, Now: now, Notify: l.SQS.Notifier(notifyURL, nil)})
	if err != nil {
		return nil, err
	}
	asg.AddGroup(lcGroup)
	return asg, nil
}

// enqueue puts n tasks that each sleep secs on the task queue.
func (lc *lcLab) enqueue(l *lab, n int, secs string) error {
	var bodies []string
	for i := range n {
		bodies = append(bodies, fmt.Sprintf(`{"id":"lc-%d","host":"web-1","diagnostic":"param","params":{"secs":%q}}`, i, secs))
	}
	return l.send(lc.tasks, bodies...)
}

// calls counts the Auto Scaling calls of op (after since): all, and failed.
func (lc *lcLab) calls(op string, since time.Time) (all, failed int, firstOK time.Time) {
	for _, c := range lc.asg.Calls() {
		at := lc.real(c.At)
		if c.Op != op || at.Before(since) {
			continue
		}
		all++
		if c.Result != "ok" {
			failed++
		} else if firstOK.IsZero() {
			firstOK = at
		}
	}
	return all, failed, firstOK
}

func inflight(a *harness.Agent) float64 { return metric(a, "autodiag_tasks_inflight") }

// terminateBusy puts n tasks of secs each on the queue, starts the agent,
// and once its four workers are busy puts the instance into
// Terminating:Wait: the agent, the trigger's time, and whether the workers
// ever got busy.
func (lc *lcLab) terminateBusy(l *lab, n int, secs string) (a *harness.Agent, trig time.Time, busy bool, err error) {
	if err := lc.enqueue(l, n, secs); err != nil {
		return nil, trig, false, err
	}
	if a, err = l.StartAgent(lc.yaml, lc.asg.Env()...); err != nil {
		return nil, trig, false, err
	}
	if !harness.Until(30*time.Second, func() bool { return inflight(a) >= 4 }) {
		return a, trig, false, nil
	}
	trig = time.Now()
	if _, err := lc.asg.Terminate(lcInstance); err != nil {
		return a, trig, true, fmt.Errorf("terminate: %w", err)
	}
	return a, trig, true, nil
}

// R4: half of the heartbeats and completions fail (throttled or 5xx)
// while a drain outlasts the hook's heartbeat timeout several times.
func r4(l *lab) (string, bool, error) {
	const total = 10
	lc, err := l.newLifecycleLab("r4", lcScale, "")
	if err != nil {
		return "", false, err
	}
	// The first completion is always refused, so the retry path runs
	// whatever the dice say; then a quarter of each call is throttled and
	// a third of the rest answers 500: half fail.
	lc.asg.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "Throttling", Count: 1})
	for _, op := range []string{"RecordLifecycleActionHeartbeat", "CompleteLifecycleAction"} {
		lc.asg.InjectFault(asgfake.Fault{Op: op, Code: "Throttling", Probability: 0.25})
		lc.asg.InjectFault(asgfake.Fault{Op: op, Code: "InternalFailure", Probability: 1.0 / 3})
	}
	a, trig, busy, err := lc.terminateBusy(l, total, "3")
	if err != nil {
		return "", false, err
	}
	if !busy {
		return "workers never busy", false, nil
	}
	code, _ := a.Wait(90 * time.Second)
	took := time.Since(trig)
	// Tasks the drain did not take stay on the queue for the next
	// instance; lost is what neither ran nor waits there.
	notRun, twice := lc.led.OnceEach(harness.IDs("lc", total))
	v, i, d, _, _ := l.SQS.Stats("r4-tasks")
	lost := notRun - (v + i + d)
	beats, beatsFailed, _ := lc.calls("RecordLifecycleActionHeartbeat", trig)
	comps, compsFailed, _ := lc.calls("CompleteLifecycleAction", trig)
	act, _ := lc.asg.Action(lcInstance)
	ttl := lcHookTTL / lcScale
	m := fmt.Sprintf("drain %s (hook timeout %s real); heartbeats %d (%d failed), completions %d (%d failed); action %s, completions %d; exit %d; tasks run %d, left on the queue %d, lost %d, twice %d",
		secs(took), secs(ttl), beats, beatsFailed, comps, compsFailed, act.EndReason, act.Completions, code, total-notRun, v+i+d, lost, twice)
	pass := code == 0 && act.EndReason == asgfake.EndCompleted && act.Completions == 1 && beatsFailed > 0 && compsFailed > 0 &&
		took > ttl && lost == 0 && twice == 0
	return m, pass, nil
}

// R8: the agent is killed (-9) mid-drain and restarted with the same
// config and Redis: it resumes the drain, heartbeats, completes once.
func r8(l *lab) (string, bool, error) {
	const total = 10
	lc, err := l.newLifecycleLab("r8", lcScale, "")
	if err != nil {
		return "", false, err
	}
	a, trig, busy, err := lc.terminateBusy(l, total, "4")
	if err != nil {
		return "", false, err
	}
	if !busy {
		return "workers never busy", false, nil
	}
	if !harness.Until(30*time.Second, func() bool { _, _, ok := lc.calls("RecordLifecycleActionHeartbeat", trig); return !ok.IsZero() }) {
		return "no heartbeat of the drain", false, nil
	}
	_ = a.Signal(syscall.SIGKILL)
	a.Wait(10 * time.Second)
	killed := time.Now()
	compsBefore, _, _ := lc.calls("CompleteLifecycleAction", trig)
	b, err := l.StartAgent(lc.yaml, lc.asg.Env()...)
	if err != nil {
		return "", false, err
	}
	code, _ := b.Wait(90 * time.Second)
	resumed := len(b.Logs("drain resumed"))
	beats, _, firstBeat := lc.calls("RecordLifecycleActionHeartbeat", killed)
	_, _, completed := lc.calls("CompleteLifecycleAction", killed)
	act, _ := lc.asg.Action(lcInstance)
	receivedAfter := 0
	for _, c := range l.SQS.Calls("ReceiveMessage") {
		if c.Queue == "r8-tasks" && c.Time.After(killed) {
			receivedAfter++
		}
	}
	m := fmt.Sprintf("restarted agent: drain resumed %d, first heartbeat %s after the kill, %d heartbeats, completed %s after the kill; action %s, completions %d (%d attempts before the kill); task receives after the kill %d; exit %d",
		resumed, secs(firstBeat.Sub(killed)), beats, secs(completed.Sub(killed)), act.EndReason, act.Completions, compsBefore, receivedAfter, code)
	pass := code == 0 && resumed == 1 && !firstBeat.IsZero() && !completed.IsZero() && firstBeat.Before(completed) &&
		act.EndReason == asgfake.EndCompleted && act.Completions == 1 && compsBefore == 0 && receivedAfter == 0
	return m, pass, nil
}

// imdsState reads target-lifecycle-state from the mock at base.
func imdsState(base string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return imdsmock.LifecycleState(ctx, base)
}

// R1: the instance is in Terminating:Wait (IMDS says Terminated, Auto
// Scaling holds the action) when SIGTERM arrives during a burst of 200
// short tasks: the agent ends what it runs, hands the rest back, and
// completes the action once, after its last task. A second agent on
// another instance takes what was handed back.
func r1(l *lab) (string, bool, error) {
	const total = 200
	// IMDS turns Terminated a few seconds after the mock starts, after the
	// agent's first poll: its next poll is a minute away, so the SIGTERM's
	// probe is what finds the action.
	const delay = 5 * time.Second
	// IMDS says Terminated delay after the mock starts.
	mock, err := l.StartMetadataMock(l.imds, "asglifecycle", "--imdsv2", "--asg-termination-delay-sec", strconv.Itoa(int(delay/time.Second)))
	if err != nil {
		return "", false, err
	}
	imdsURL := mock.URL
	lc, err := l.newLifecycleLab("r1", 1, fmt.Sprintf("lifecycle:\n  sources: [signal, imds]\n  asg_name: %s\n  hook_name: %s\n  imds_poll_interval: 1m\n  heartbeat_interval: %s\n  drain_timeout: 1m\n",
		lcGroup, lcHook, lcInterval))
	if err != nil {
		return "", false, err
	}
	env := append(lc.asg.Env(), "AWS_EC2_METADATA_DISABLED=false", "AWS_EC2_METADATA_SERVICE_ENDPOINT="+imdsURL)
	a, err := l.StartAgent(lc.yaml, env...)
	if err != nil {
		return "", false, err
	}
	if !harness.Until(15*time.Second, func() bool { st, _ := imdsState(imdsURL); return st == "Terminated" }) {
		if err := mock.Died(); err != nil {
			return "", false, err
		}
		return "IMDS never said Terminated", false, nil
	}
	if len(a.Logs("lifecycle trigger")) > 0 {
		return "the agent's own IMDS poll saw Terminated before the SIGTERM", false, nil
	}
	// Auto Scaling and IMDS tell the same story.
	if _, err := lc.asg.Terminate(lcInstance); err != nil {
		return "", false, fmt.Errorf("terminate: %w", err)
	}
	want := harness.IDs("r1", total)
	var bodies []string
	for _, id := range want {
		bodies = append(bodies, harness.TaskBody(id, "short"))
	}
	if err := l.send(lc.tasks, bodies...); err != nil {
		return "", false, err
	}
	if !harness.Until(60*time.Second, func() bool { n, _, _ := lc.led.Counts(); return len(n) >= 40 }) {
		return "burst did not start", false, nil
	}
	term := time.Now()
	_ = a.Signal(syscall.SIGTERM)
	code, _ := a.Wait(60 * time.Second)
	exitAfter := time.Since(term)
	var lastEnded time.Time
	for _, line := range a.Logs("task ended") {
		if at, _ := harness.LogTime(line); at.After(lastEnded) {
			lastEnded = at
		}
	}
	ranOnA, _, _ := lc.led.Counts()
	comps, compsFailed, completed := lc.calls("CompleteLifecycleAction", term)
	act, _ := lc.asg.Action(lcInstance)

	b, err := l.StartAgent(harness.AgentConfig{Instance: "i-0ther0000000000000", Workers: 8, QueueURL: lc.tasks,
		Visibility: 60 * time.Second, RedisAddr: lc.redis.Addr, Prefix: "r1:", Ledger: lc.led}.YAML())
	if err != nil {
		return "", false, err
	}
	drained := harness.Until(120*time.Second, func() bool { return l.SQS.Drained("r1-tasks") })
	lost, twice := lc.led.OnceEach(want)
	_ = b.Signal(syscall.SIGTERM)
	b.Wait(30 * time.Second)
	m := fmt.Sprintf("agent-a ran %d, exit %d %s after SIGTERM; completion attempts %d (%d failed), action %s with %d completion, %s after its last task ended; second agent ran the rest: lost %d, twice %d, drained %v",
		len(ranOnA), code, secs(exitAfter), comps, compsFailed, act.EndReason, act.Completions, secs(completed.Sub(lastEnded)), lost, twice, drained)
	pass := code == 0 && act.EndReason == asgfake.EndCompleted && act.Completions == 1 && !completed.IsZero() && completed.After(lastEnded) &&
		lost == 0 && twice == 0 && drained
	if err := mock.Died(); err != nil {
		m, pass = m+"; "+err.Error(), false
	}
	return m, pass, nil
}
