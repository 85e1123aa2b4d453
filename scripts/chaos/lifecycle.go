package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
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
	asg    *asgfake.Server
	asgURL string
	hs     *http.Server
	tasks  string // task queue URL
	notify string // lifecycle queue URL
	yaml   string
	redis  *redisSrv
	led    *ledger
	base   time.Time // when the fake's clock began
	scale  time.Duration
}

// real turns a time of the fake's clock into wall-clock time.
func (lc *lcLab) real(t time.Time) time.Time { return lc.base.Add(t.Sub(lc.base) / lc.scale) }

// newLifecycleLab: the fake's clock runs scale times the wall clock;
// lifecycleYAML is the agent's lifecycle section ("" = the sqs source).
func (l *lab) newLifecycleLab(name string, scale time.Duration, lifecycleYAML string) (*lcLab, error) {
	lc := &lcLab{scale: scale}
	var err error
	if lc.redis, err = l.newRedis(name); err != nil {
		return nil, err
	}
	if lc.led, err = l.newLedger(name); err != nil {
		return nil, err
	}
	if lc.tasks, err = l.queue(name+"-tasks", map[string]string{"VisibilityTimeout": "60"}); err != nil {
		return nil, err
	}
	if lc.notify, err = l.queue(name+"-lifecycle", nil); err != nil {
		return nil, err
	}
	base := time.Now()
	lc.base = base
	lc.asg, lc.asgURL, lc.hs, err = l.serveASG(5, func() time.Time { return base.Add(time.Since(base) * scale) }, lc.notify)
	if err != nil {
		return nil, err
	}
	if err := lc.asg.AddInstance(lcGroup, lcInstance); err != nil {
		return nil, fmt.Errorf("asgfake: %w", err)
	}
	if err := lc.asg.PutHook(asgfake.Hook{Group: lcGroup, Name: lcHook, HeartbeatTimeout: lcHookTTL, DefaultResult: asgfake.ResultAbandon}); err != nil {
		return nil, fmt.Errorf("asgfake: %w", err)
	}

	lc.yaml = agentConfig{instance: lcInstance, workers: 4, queueURL: lc.tasks, visibility: 60 * time.Second,
		redisAddr: lc.redis.addr, prefix: name + ":", ledger: lc.led}.yaml()
	if lifecycleYAML != "" {
		lc.yaml += lifecycleYAML
		return lc, nil
	}
	lc.yaml += fmt.Sprintf("lifecycle:\n  sources: [signal, sqs]\n  queue_url: %s\n  hook_name: %s\n  heartbeat_interval: %s\n  drain_timeout: 1m\n",
		lc.notify, lcHook, lcInterval)
	return lc, nil
}

func (lc *lcLab) close() { _ = lc.hs.Close() }

// serveASG serves an Auto Scaling fake with group lcGroup on a loopback
// port; its lifecycle notifications go to the SQS queue notifyURL. The
// caller closes the returned server.
func (l *lab) serveASG(seed uint64, now func() time.Time, notifyURL string) (*asgfake.Server, string, *http.Server, error) {
	asg := asgfake.New(asgfake.Options{Seed: seed, Now: now,
		Notify: func(body string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _ = l.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(notifyURL), MessageBody: aws.String(body)})
		}})
	asg.AddGroup(lcGroup)
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, fmt.Errorf("asg listener: %w", err)
	}
	hs := &http.Server{Handler: asg, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return asg, "http://" + ln.Addr().String(), hs, nil
}

func (lc *lcLab) env() []string { return []string{"AWS_ENDPOINT_URL_AUTO_SCALING=" + lc.asgURL} }

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

func inflight(a *agent) float64 { return a.metric("autodiag_tasks_inflight") }

// R4: half of the heartbeats and completions fail (throttled or 5xx)
// while a drain outlasts the hook's heartbeat timeout several times.
func r4(l *lab) (string, bool, error) {
	const total = 10
	lc, err := l.newLifecycleLab("r4", lcScale, "")
	if err != nil {
		return "", false, err
	}
	defer lc.close()
	// The first completion is always refused, so the retry path runs
	// whatever the dice say; then a quarter of each call is throttled and
	// a third of the rest answers 500: half fail.
	lc.asg.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "Throttling", Count: 1})
	for _, op := range []string{"RecordLifecycleActionHeartbeat", "CompleteLifecycleAction"} {
		lc.asg.InjectFault(asgfake.Fault{Op: op, Code: "Throttling", Probability: 0.25})
		lc.asg.InjectFault(asgfake.Fault{Op: op, Code: "InternalFailure", Probability: 1.0 / 3})
	}
	if err := lc.enqueue(l, total, "3"); err != nil {
		return "", false, err
	}
	a, err := l.startAgent("r4", lc.yaml, lc.env()...)
	if err != nil {
		return "", false, err
	}
	if !eventually(30*time.Second, func() bool { return inflight(a) >= 4 }) {
		return "workers never busy", false, nil
	}
	trig := time.Now()
	if _, err := lc.asg.Terminate(lcInstance); err != nil {
		return "", false, fmt.Errorf("terminate: %w", err)
	}
	code := a.wait(90 * time.Second)
	took := time.Since(trig)
	// Tasks the drain did not take stay on the queue for the next
	// instance; lost is what neither ran nor waits there.
	notRun, twice := onceEach(lc.led, ids("lc", total))
	v, i, d, _, _ := l.sqs.Stats("r4-tasks")
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
	defer lc.close()
	if err := lc.enqueue(l, total, "4"); err != nil {
		return "", false, err
	}
	a, err := l.startAgent("r8-a", lc.yaml, lc.env()...)
	if err != nil {
		return "", false, err
	}
	if !eventually(30*time.Second, func() bool { return inflight(a) >= 4 }) {
		return "workers never busy", false, nil
	}
	trig := time.Now()
	if _, err := lc.asg.Terminate(lcInstance); err != nil {
		return "", false, fmt.Errorf("terminate: %w", err)
	}
	if !eventually(30*time.Second, func() bool { _, _, ok := lc.calls("RecordLifecycleActionHeartbeat", trig); return !ok.IsZero() }) {
		return "no heartbeat of the drain", false, nil
	}
	_ = a.cmd.Process.Signal(syscall.SIGKILL)
	a.wait(10 * time.Second)
	killed := time.Now()
	compsBefore, _, _ := lc.calls("CompleteLifecycleAction", trig)
	b, err := l.startAgent("r8-b", lc.yaml, lc.env()...)
	if err != nil {
		return "", false, err
	}
	code := b.wait(90 * time.Second)
	resumed := len(b.logs("drain resumed"))
	beats, _, firstBeat := lc.calls("RecordLifecycleActionHeartbeat", killed)
	_, _, completed := lc.calls("CompleteLifecycleAction", killed)
	act, _ := lc.asg.Action(lcInstance)
	receivedAfter := 0
	for _, c := range l.sqs.Calls("ReceiveMessage") {
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

// startIMDSMock runs ec2-metadata-mock in asglifecycle mode: its
// target-lifecycle-state turns Terminated delay after it starts. It returns
// the mock's URL once it answers.
func (l *lab) startIMDSMock(delay time.Duration) (string, error) {
	if l.imds == "" {
		return "", errors.New("ec2-metadata-mock not given (-imds-mock; scripts/chaos.sh installs it)")
	}
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	dir := filepath.Join(l.dir, "imds")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("imds dir: %w", err)
	}
	cmd := exec.CommandContext(context.Background(), l.imds, "asglifecycle", "--imdsv2",
		"--asg-termination-delay-sec", strconv.Itoa(int(delay/time.Second)), "-p", port, "-n", "127.0.0.1")
	cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	cmd.Dir = dir
	if err := l.spawn(cmd); err != nil {
		return "", err
	}
	go func() { _ = cmd.Wait() }()
	url := "http://" + addr
	if !eventually(10*time.Second, func() bool { _, err := imdsState(url); return err == nil }) {
		return "", errors.New("ec2-metadata-mock did not answer within 10s")
	}
	return url, nil
}

// imdsState reads target-lifecycle-state (IMDSv2).
func imdsState(base string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/latest/api/token", nil)
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("imds token: %w", err)
	}
	tok, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, base+"/latest/meta-data/autoscaling/target-lifecycle-state", nil)
	req.Header.Set("X-aws-ec2-metadata-token", string(tok))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("imds state: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("target-lifecycle-state: %s", resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
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
	imdsURL, err := l.startIMDSMock(delay)
	if err != nil {
		return "", false, err
	}
	lc, err := l.newLifecycleLab("r1", 1, fmt.Sprintf("lifecycle:\n  sources: [signal, imds]\n  asg_name: %s\n  hook_name: %s\n  imds_poll_interval: 1m\n  heartbeat_interval: %s\n  drain_timeout: 1m\n",
		lcGroup, lcHook, lcInterval))
	if err != nil {
		return "", false, err
	}
	defer lc.close()
	env := append(lc.env(), "AWS_EC2_METADATA_DISABLED=false", "AWS_EC2_METADATA_SERVICE_ENDPOINT="+imdsURL)
	a, err := l.startAgent("r1-a", lc.yaml, env...)
	if err != nil {
		return "", false, err
	}
	if !eventually(15*time.Second, func() bool { st, _ := imdsState(imdsURL); return st == "Terminated" }) {
		return "IMDS never said Terminated", false, nil
	}
	if len(a.logs("lifecycle trigger")) > 0 {
		return "the agent's own IMDS poll saw Terminated before the SIGTERM", false, nil
	}
	// Auto Scaling and IMDS tell the same story.
	if _, err := lc.asg.Terminate(lcInstance); err != nil {
		return "", false, fmt.Errorf("terminate: %w", err)
	}
	want := ids("r1", total)
	var bodies []string
	for _, id := range want {
		bodies = append(bodies, taskBody(id, "short"))
	}
	if err := l.send(lc.tasks, bodies...); err != nil {
		return "", false, err
	}
	if !eventually(60*time.Second, func() bool { n, _ := lc.led.counts(); return len(n) >= 40 }) {
		return "burst did not start", false, nil
	}
	term := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	code := a.wait(60 * time.Second)
	exitAfter := time.Since(term)
	var lastEnded time.Time
	for _, line := range a.logs("task ended") {
		if at, _ := line["_at"].(time.Time); at.After(lastEnded) {
			lastEnded = at
		}
	}
	ranOnA, _ := lc.led.counts()
	comps, compsFailed, completed := lc.calls("CompleteLifecycleAction", term)
	act, _ := lc.asg.Action(lcInstance)

	b, err := l.startAgent("r1-b", agentConfig{instance: "i-0ther0000000000000", workers: 8, queueURL: lc.tasks,
		visibility: 60 * time.Second, redisAddr: lc.redis.addr, prefix: "r1:", ledger: lc.led}.yaml())
	if err != nil {
		return "", false, err
	}
	drained := eventually(120*time.Second, func() bool { return l.drained("r1-tasks") })
	lost, twice := onceEach(lc.led, want)
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	b.wait(30 * time.Second)
	m := fmt.Sprintf("agent-a ran %d, exit %d %s after SIGTERM; completion attempts %d (%d failed), action %s with %d completion, %s after its last task ended; second agent ran the rest: lost %d, twice %d, drained %v",
		len(ranOnA), code, secs(exitAfter), comps, compsFailed, act.EndReason, act.Completions, secs(completed.Sub(lastEnded)), lost, twice, drained)
	pass := code == 0 && act.EndReason == asgfake.EndCompleted && act.Completions == 1 && !completed.IsZero() && completed.After(lastEnded) &&
		lost == 0 && twice == 0 && drained
	return m, pass, nil
}
