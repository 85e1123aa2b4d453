package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/internal/harness"
)

// receiveRetryMax is the intake's longest pause between failed receives
// (agent/worker/receiver.go).
const receiveRetryMax = 30 * time.Second

// R2: agent-a is killed with -9 while its task waits at the gate; agent-b
// takes the task over once its lease lapses.
func r2(l *lab) (string, bool, error) {
	rs, err := l.StartRedis("r2")
	if err != nil {
		return "", false, err
	}
	url, err := l.SQS.CreateQueue("r2", nil)
	if err != nil {
		return "", false, err
	}
	led, err := l.NewLedger("r2")
	if err != nil {
		return "", false, err
	}
	defer led.Open()
	cfg := func(inst string) string {
		return harness.AgentConfig{Instance: inst, Workers: 2, QueueURL: url, RedisAddr: rs.Addr, Prefix: "r2:", Ledger: led}.YAML()
	}
	a, err := l.StartAgent(cfg("agent-a"))
	if err != nil {
		return "", false, err
	}
	if err := l.send(url, harness.TaskBody("k-1", "gate")); err != nil {
		return "", false, err
	}
	if !harness.Until(20*time.Second, func() bool { n, _, _ := led.Counts(); return n["k-1"] == 1 }) {
		return "k-1 never started on agent-a", false, nil
	}
	if _, err := l.StartAgent(cfg("agent-b")); err != nil {
		return "", false, err
	}
	a.Kill()
	killed := time.Now()
	before, _, _ := led.Counts()
	rerun := harness.Until(60*time.Second, func() bool { n, _, _ := led.Counts(); return n["k-1"] == 2 })
	took := time.Since(killed)
	led.Open()
	rc := rs.Client()
	defer rc.Close()
	store := state.NewRedis(rc, state.RedisOptions{Prefix: "r2:"})
	var rec state.TaskRecord
	done := harness.Until(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		rec, _, _ = store.Task(ctx, "k-1")
		return rec.Status == state.StatusDone && l.SQS.Drained("r2")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	left, err := store.Inflight(ctx, "agent-a")
	if err != nil {
		return "", false, fmt.Errorf("in flight of agent-a: %w", err)
	}
	n, _, _ := led.Counts()
	m := fmt.Sprintf("re-run on %s %s after the kill; executions %d (%d before the kill); record %s/%s attempts %d; agent-a in flight %d",
		rec.Owner, secs(took), n["k-1"], before["k-1"], rec.Status, rec.Outcome, rec.Attempts, len(left))
	return m, rerun && done && n["k-1"] == 2 && before["k-1"] == 1 && rec.Owner == "agent-b" && rec.Attempts == 2 && len(left) == 0, nil
}

// r3Agents starts the fail-open and the fail-closed agent of R3 and R3b on
// their own queues, against redisAddr.
func r3Agents(l *lab, name, redisAddr string, timeout time.Duration, led *harness.Ledger) (open, closed *harness.Agent, qOpen, qClosed string, err error) {
	if qOpen, err = l.SQS.CreateQueue(name+"-open", nil); err != nil {
		return
	}
	if qClosed, err = l.SQS.CreateQueue(name+"-closed", nil); err != nil {
		return
	}
	rule := func(mode string) string {
		return "    - name: cap\n      key: host\n      limits: [{window: {count: 1000, per: 1m}}]\n      fail: " + mode + "\n"
	}
	open, err = l.StartAgent(harness.AgentConfig{Instance: "agent-open", Workers: 8, QueueURL: qOpen, RedisAddr: redisAddr,
		Prefix: name + ":", RedisTimeout: timeout, StateFail: "open", Ledger: led, Rules: rule("open")}.YAML())
	if err != nil {
		return
	}
	closed, err = l.StartAgent(harness.AgentConfig{Instance: "agent-closed", Workers: 4, QueueURL: qClosed, RedisAddr: redisAddr,
		Prefix: name + ":", RedisTimeout: timeout, StateFail: "closed", Ledger: led, Rules: rule("closed")}.YAML())
	return
}

// R3: Redis killed for 10 s and restarted empty under a fail-open and a
// fail-closed agent; afterwards a probe task every 100 ms measures when
// tasks are claimed and recorded in Redis again.
func r3(l *lab) (string, bool, error) {
	const (
		outage  = 10 * time.Second
		timeout = 200 * time.Millisecond
	)
	rs, err := l.StartRedis("r3")
	if err != nil {
		return "", false, err
	}
	led, err := l.NewLedger("r3")
	if err != nil {
		return "", false, err
	}
	open, closed, qOpen, qClosed, err := r3Agents(l, "r3", rs.Addr, timeout, led)
	if err != nil {
		return "", false, err
	}
	if err := l.send(qOpen, harness.TaskBody("before-open", "mark")); err != nil {
		return "", false, err
	}
	if err := l.send(qClosed, harness.TaskBody("before-closed", "mark")); err != nil {
		return "", false, err
	}
	if !harness.Until(20*time.Second, func() bool { n, _, _ := led.Counts(); return n["before-open"] == 1 && n["before-closed"] == 1 }) {
		return "tasks before the outage did not run", false, nil
	}
	rs.Kill()
	killed := time.Now()
	duringOpen, duringClosed := harness.IDs("open", 4), harness.IDs("closed", 4)
	for i := range duringOpen {
		if err := l.send(qOpen, harness.TaskBody(duringOpen[i], "mark")); err != nil {
			return "", false, err
		}
		if err := l.send(qClosed, harness.TaskBody(duringClosed[i], "mark")); err != nil {
			return "", false, err
		}
	}
	openRan := harness.Until(outage-time.Second, func() bool { return outcomes(open)["succeeded"] == 1+len(duringOpen) })
	time.Sleep(time.Until(killed.Add(outage)))
	n, _, _ := led.Counts()
	closedRan := 0
	for _, id := range duringClosed {
		closedRan += n[id]
	}
	limDegraded := metric(open, "autodiag_limiter_degraded_total")
	stateDegradedClosed := metric(closed, "autodiag_state_degraded_total", `op="claim"`)

	// Redis "returns" when its process starts, before it answers: the
	// measure includes the agent's reconnection.
	back := time.Now()
	if err := l.RestartRedis(rs); err != nil {
		return "", false, err
	}
	rc := rs.Client()
	defer rc.Close()
	store := state.NewRedis(rc, state.RedisOptions{Prefix: "r3:"})
	var normal time.Duration
	for i := 0; normal == 0 && time.Since(back) < 20*time.Second; i++ {
		id := fmt.Sprintf("probe-%d", i)
		if err := l.send(qOpen, harness.TaskBody(id, "mark")); err != nil {
			return "", false, err
		}
		// A probe is normal flow when its record is done in Redis while
		// the backlog of the outage would still be waiting to retry.
		deadline := time.Now().Add(100 * time.Millisecond)
		for time.Now().Before(deadline) && normal == 0 {
			for j := 0; j <= i; j++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				rec, ok, err := store.Task(ctx, fmt.Sprintf("probe-%d", j))
				cancel()
				if err == nil && ok && rec.Status == state.StatusDone {
					normal = time.Since(back)
					break
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	closedAfter := harness.Until(60*time.Second, func() bool {
		n, _, _ := led.Counts()
		for _, id := range duringClosed {
			if n[id] != 1 {
				return false
			}
		}
		return true
	})
	alive := open.Alive() && closed.Alive()
	m := fmt.Sprintf("alive %v; open ran %d/%d during outage, limiter degraded %g; closed ran %d during outage (claim degraded %g), all %d ran once after: %v; first probe recorded %s after Redis returned",
		alive, len(duringOpen), len(duringOpen), limDegraded, closedRan, stateDegradedClosed, len(duringClosed), closedAfter, secs(normal))
	if !openRan {
		m = strings.Replace(m, fmt.Sprintf("open ran %d/", len(duringOpen)), fmt.Sprintf("open ran %d/", outcomes(open)["succeeded"]-1), 1)
	}
	pass := alive && openRan && limDegraded >= float64(len(duringOpen)) && closedRan == 0 && stateDegradedClosed > 0 &&
		closedAfter && normal > 0 && normal <= time.Second
	return m, pass, nil
}

// R10: every ReceiveMessage of the queue answers 500 for 20 s while tasks
// wait; the intake backs off, and after the fault is lifted resumes no
// later than the backoff step it was in.
func r10(l *lab) (string, bool, error) {
	const faultFor = 20 * time.Second
	rs, err := l.StartRedis("r10")
	if err != nil {
		return "", false, err
	}
	url, err := l.SQS.CreateQueue("r10", nil)
	if err != nil {
		return "", false, err
	}
	led, err := l.NewLedger("r10")
	if err != nil {
		return "", false, err
	}
	a, err := l.StartAgent(harness.AgentConfig{Instance: "agent-r10", Workers: 4, QueueURL: url, RedisAddr: rs.Addr, Prefix: "r10:", Ledger: led}.YAML())
	if err != nil {
		return "", false, err
	}
	id := l.SQS.InjectFault(sqsfake.Fault{Op: "ReceiveMessage", Queue: "r10", Kind: sqsfake.FaultServerError})
	began := time.Now()
	// A long poll begun before the fault would still deliver: the tasks go
	// out once the intake's single receive loop has hit the fault.
	if !harness.Until(10*time.Second, func() bool { return l.SQS.FaultFired(id) > 0 }) {
		return "no receive hit the fault", false, nil
	}
	want := harness.IDs("r10", 20)
	var bodies []string
	for _, id := range want {
		bodies = append(bodies, harness.TaskBody(id, "mark"))
	}
	if err := l.send(url, bodies...); err != nil {
		return "", false, err
	}
	time.Sleep(time.Until(began.Add(faultFor)))
	fired := l.SQS.FaultFired(id)
	l.SQS.RemoveFault(id)
	lifted := time.Now()
	// The step the intake was waiting out when the fault was lifted: the
	// last "receive failed" line's retry_in, counted from that line.
	var step time.Duration
	var stepEnds time.Time
	for _, line := range a.Logs("receive failed") {
		at, _ := harness.LogTime(line)
		if r, ok := line["retry_in"].(float64); ok && at.Before(lifted) {
			step = time.Duration(r * float64(time.Second))
			stepEnds = at.Add(step)
		}
	}
	allRan := harness.Until(receiveRetryMax+30*time.Second, func() bool {
		lost, _ := led.OnceEach(want)
		return lost == 0
	})
	_, first, _ := led.Counts()
	var resumed time.Time
	for _, t := range first {
		if resumed.IsZero() || t.Before(resumed) {
			resumed = t
		}
	}
	drained := harness.Until(10*time.Second, func() bool { return l.SQS.Drained("r10") })
	lost, twice := led.OnceEach(want)
	gap := resumed.Sub(lifted)
	// One backoff step: the first task runs no later than the end of the
	// step in progress, plus the time to receive and start it (1 s).
	pass := allRan && drained && lost == 0 && twice == 0 && fired > 0 && step > 0 && step <= receiveRetryMax &&
		!resumed.Before(lifted) && !resumed.After(stepEnds.Add(time.Second))
	m := fmt.Sprintf("%d receives answered 500; step in progress %s (ends %s after lift); first task ran %s after lift; lost %d, twice %d, drained %v",
		fired, secs(step), secs(stepEnds.Sub(lifted)), secs(gap), lost, twice, drained)
	return m, pass, nil
}

// hostile are message bodies that must never run: the task package's fuzz
// seeds and injection attempts aimed at this catalog.
func hostile() []string {
	big := strings.Repeat("A", 200<<10)
	return []string{
		`{"host":"web;reboot","diagnostic":"mark"}`,
		`{"host":"$(id).example.com","diagnostic":"mark"}`,
		"{\"host\":\"`id`\",\"diagnostic\":\"mark\"}",
		`{"host":"-oProxyCommand=touch /tmp/x","diagnostic":"mark"}`,
		`{"host":"web-1","diagnostic":"param","params":{"secs":"1; reboot"}}`,
		`{"host":"web-1","diagnostic":"param","params":{"secs":"-1"}}`,
		`{"host":"web-1","diagnostic":"param","params":{"secs":"1","x":"y"}}`,
		`{"host":"web-1","diagnostic":"mark","params":{"x":"$(reboot)"}}`,
		`{"host":"web-1","diagnostic":"../../bin/sh"}`,
		`{"host":"ex\u0430mple.example.com","diagnostic":"mark"}`,
		`{"host":"ok.example.com","HOST":"169.254.169.254","diagnostic":"mark"}`,
		`{"host":"ok.example.com","host":"169.254.169.254","diagnostic":"mark"}`,
		`{"ho\u017ft":"169.254.169.254","diagnostic":"mark"}`,
		`{"host":"169.254.169.254","diagnostic":"mark"}`,
		`{"host":"0xa9fea9fe","diagnostic":"mark"}`,
		`{"host":"127.1","diagnostic":"mark"}`,
		`{"host":"localhost","diagnostic":"mark"}`,
		`{"host":"web-1\n","diagnostic":"mark"}`,
		`{"host":"` + strings.Repeat("a.", 150) + `example.com","diagnostic":"mark"}`,
		`{"host":"web-1","diagnostic":"mark","created_at":"9999-01-01T00:00:00Z"}`,
		`{"host":"web-1","diagnostic":"mark","junk":"` + big + `"}`,
		`{"host":["web-1"],"diagnostic":"mark"}`,
		`{"host":"web-1","diagnostic":"mark"` + strings.Repeat(`,"a":{"b":`, 1) + `[` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `]}}`,
		`{"host":null,"diagnostic":"mark"}`,
		`not json`,
		`{}`,
		`[]`,
		`"web-1"`,
	}
}

// R5: every hostile message is dead-lettered with a reason and nothing runs.
func r5(l *lab) (string, bool, error) {
	rs, err := l.StartRedis("r5")
	if err != nil {
		return "", false, err
	}
	url, err := l.SQS.CreateQueue("r5", nil)
	if err != nil {
		return "", false, err
	}
	dlq, err := l.SQS.CreateQueue("r5-dlq", nil)
	if err != nil {
		return "", false, err
	}
	led, err := l.NewLedger("r5")
	if err != nil {
		return "", false, err
	}
	a, err := l.StartAgent(harness.AgentConfig{Instance: "agent-r5", Workers: 4, QueueURL: url, DLQURL: dlq, RedisAddr: rs.Addr, Prefix: "r5:", Ledger: led}.YAML())
	if err != nil {
		return "", false, err
	}
	bad := hostile()
	for _, b := range bad {
		if err := l.send(url, b); err != nil {
			return "", false, err
		}
	}
	done := harness.Until(60*time.Second, func() bool {
		_, _, _, st, _ := l.SQS.Stats("r5-dlq")
		return l.SQS.Drained("r5") && st.Sent == len(bad)
	})
	v, _ := l.SQS.Queue("r5-dlq")
	withReason := 0
	reasons := map[string]int{}
	for _, m := range v.Messages {
		if r := m.Attributes["autodiag-reject-reason"].StringValue; r != "" {
			withReason++
			k, _, _ := strings.Cut(r, ":")
			reasons[k]++
		}
	}
	n, _, _ := led.Counts()
	panics := strings.Count(a.Output(), "panic")
	m := fmt.Sprintf("%d hostile messages: %d dead-lettered with a reason %v; executions %d; panics %d; agent alive %v",
		len(bad), withReason, reasons, len(n), panics, a.Alive())
	return m, done && withReason == len(bad) && len(n) == 0 && panics == 0 && a.Alive(), nil
}

// R6: 8 agents on one Redis, 32 workers each, each take 1,000 tasks
// through the admin API (POST /v1/tasks), under a daily quota of 2 for the host. Each
// agent gets half its admin connection cap in requests at once: beyond
// the cap, requests wait on kept-alive connections and starve.
func r6(l *lab) (string, bool, error) {
	rs, err := l.StartRedis("r6")
	if err != nil {
		return "", false, err
	}
	rules := "    - name: quota\n      key: host\n      limits: [{daily: 2}]\n"
	agents := make([]*harness.Agent, 8)
	for i := range agents {
		cfg := harness.AgentConfig{Instance: fmt.Sprintf("fleet-%d", i), Workers: 32, RedisAddr: rs.Addr, Prefix: "r6:",
			LimiterFail: "closed", Rules: rules}.YAML()
		if agents[i], err = l.StartAgent(cfg); err != nil {
			return "", false, err
		}
	}
	perAgent := admin.MaxConns / 2
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: perAgent, MaxIdleConnsPerHost: perAgent}}
	sem := make(chan struct{}, perAgent*len(agents))
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, refused := 0, 0
	var firstErr error
	for i := range 8000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			code, _, err := post(agents[i%8], client, "/v1/tasks", fmt.Sprintf(`{"id":"q-%d","host":"web-01","diagnostic":"noop"}`, i))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if firstErr == nil {
					firstErr = err
				}
			case code == http.StatusAccepted:
				accepted++
			default:
				refused++
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return "", false, firstErr
	}
	total := func(outcome string) int {
		n := 0
		for _, a := range agents {
			n += outcomes(a)[outcome]
		}
		return n
	}
	settled := harness.Until(120*time.Second, func() bool { return total("succeeded")+total("rate_limited") == accepted })
	ok, limited := total("succeeded"), total("rate_limited")
	m := fmt.Sprintf("%d decisions (%d refused by POST /v1/tasks, %d requests in flight): %d allowed, %d rate_limited", accepted, refused, cap(sem), ok, limited)
	return m, settled && ok == 2 && limited == accepted-2 && accepted > 0, nil
}

// R7: injection through the admin API (POST /v1/tasks) is refused with a reason and
// never runs; without admin_addr the agent binds loopback.
func r7(l *lab) (string, bool, error) {
	led, err := l.NewLedger("r7")
	if err != nil {
		return "", false, err
	}
	a, err := l.StartAgent(harness.AgentConfig{Instance: "agent-r7", Workers: 2, Ledger: led}.YAML())
	if err != nil {
		return "", false, err
	}
	refused, withReason := 0, 0
	bad := hostile()
	for _, b := range bad {
		code, out, err := post(a, http.DefaultClient, "/v1/tasks", b)
		if err != nil {
			return "", false, err
		}
		if code >= 400 && code < 500 {
			refused++
			if r, _ := out["reason"].(string); r != "" {
				withReason++
			}
		}
	}
	n, _, _ := led.Counts()

	// Default admin address: the agent either listens on it or fails to
	// because another process holds the port; both name the address.
	yaml := strings.Replace(harness.AgentConfig{Instance: "agent-r7d", Workers: 1}.YAML(), "admin_addr: 127.0.0.1:0\n", "", 1)
	d, err := l.SpawnAgent(yaml)
	if err != nil {
		return "", false, err
	}
	var addr string
	switch err := d.AwaitReady(30 * time.Second); {
	case err == nil:
		addr = d.Addr()
	case !d.Alive():
		if out := d.Output(); strings.Contains(out, "admin listener") && strings.Contains(out, "127.0.0.1:9464") {
			addr = "127.0.0.1:9464 (in use by another process)"
		}
	default:
		return "", false, errors.New("default-config agent neither ready nor exited in 30s")
	}
	m := fmt.Sprintf("%d/%d injections refused, %d with a reason, %d executions; default admin address %s",
		refused, len(bad), withReason, len(n), addr)
	return m, refused == len(bad) && withReason == len(bad) && len(n) == 0 && strings.HasPrefix(addr, "127.0.0.1:"), nil
}
