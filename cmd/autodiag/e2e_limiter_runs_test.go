package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/harness"
	"github.com/autodiag/autodiag/internal/testenv"
)

// End-to-end tests of the limiter's run limits through the binary: agents
// sharing one Redis and one sqsfake queue, whose diagnostics mark their own
// start and end.

// runMarks is the file the marking diagnostics append to, one line per
// event: "start <id> <unix ns>" first thing, "end <id> <unix ns>" last.
// Each line is one write with O_APPEND (the shell's >>), so the file's order
// is the order the events happened in, whichever agent ran them.
type runMarks struct {
	dir, path, gate string
}

func newRunMarks(tb testing.TB) *runMarks {
	tb.Helper()
	dir := tb.TempDir()
	m := &runMarks{dir: dir, path: filepath.Join(dir, "marks"), gate: filepath.Join(dir, "gate")}
	// A diagnostic waiting at the gate must not outlive the test, even when
	// its agent was killed (no agent ends its process group then): the gate
	// opens at cleanup, and the cleanup waits for every held shell to exit
	// before TempDir removes the directory, since a held shell still
	// appends its end mark there once the gate opens. The wait also ends
	// when the directory is gone.
	tb.Cleanup(func() {
		_ = os.WriteFile(m.gate, nil, 0o644)
		m.awaitHeld(tb)
	})
	return m
}

// awaitHeld waits until every shell that held at the gate has exited
// (each wrote its pid in its held-ID directory), within a bound.
func (m *runMarks) awaitHeld(tb testing.TB) {
	tb.Helper()
	pids, _ := filepath.Glob(filepath.Join(m.dir, "held-*", "pid"))
	deadline := time.Now().Add(30 * time.Second)
	for _, f := range pids {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		for processLives(pid) {
			if time.Now().After(deadline) {
				tb.Errorf("held diagnostic (pid %d) still runs 30s after the gate opened", pid)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// processLives reports whether pid runs: it exists and is not a zombie
// (an orphan's zombie waits for a reaper that may never come in a
// container, and writes nothing).
func processLives(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// script is the diagnostic's program, run as [/bin/sh, -c, script, sh,
// ID, MODE]: the task id travels only as an argument. MODE "hold" makes the
// first run of that id wait for the gate (mkdir is the atomic "first").
func (m *runMarks) script() string {
	return fmt.Sprintf(`m='%s'
printf 'start %%s %%s\n' "$1" "$(date +%%s%%N)" >> "$m"
if [ "$2" = hold ] && mkdir '%s'/held-"$1" 2>/dev/null; then
  echo $$ > '%s'/held-"$1"/pid
  while [ ! -e '%s' ] && [ -d '%s' ]; do sleep 0.05; done
fi
if [ "$2" = brief ]; then sleep 0.01; fi
printf 'end %%s %%s\n' "$1" "$(date +%%s%%N)" >> "$m"
`, m.path, m.dir, m.dir, m.gate, m.dir)
}

// runMark is one line of the marks file.
type runMark struct {
	start bool
	id    string
	at    time.Time
}

func (m *runMarks) read(tb testing.TB) []runMark {
	tb.Helper()
	b, err := os.ReadFile(m.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	// A diagnostic may be writing its line as the file is read (the
	// tests read it while agents run): a last line without its newline is
	// not written yet, and is read next time.
	b = b[:bytes.LastIndexByte(b, '\n')+1]
	var out []runMark
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 || (fs[0] != "start" && fs[0] != "end") {
			tb.Fatalf("marks: malformed line %q", sc.Text())
		}
		ns, err := strconv.ParseInt(fs[2], 10, 64)
		if err != nil {
			tb.Fatalf("marks: line %q: %v", sc.Text(), err)
		}
		out = append(out, runMark{start: fs[0] == "start", id: fs[1], at: time.Unix(0, ns)})
	}
	return out
}

// limitRunsConfig is the YAML of one agent of these tests.
type limitRunsConfig struct {
	instance, queueURL, redisAddr, prefix string
	workers                               int
	visibility                            time.Duration
	marks                                 *runMarks
	rules                                 string // the limiter.rules list, YAML flow or block at indent 2
}

func (c limitRunsConfig) yaml() string {
	var b strings.Builder
	// The catalog probes {host} (runs_on any): any agent takes any task.
	b.WriteString("  - name: fail\n    command: [/bin/false, '{host}']\n    runs_on: any\n    timeout: 10s\n")
	if c.marks != nil {
		script, _ := json.Marshal(c.marks.script()) // a JSON string is a YAML flow scalar
		for _, d := range []struct{ name, mode string }{{"mark", "brief"}, {"heavy", ""}, {"heavy-hold", "hold"}} {
			fmt.Fprintf(&b, "  - name: %s\n    command: [/bin/sh, -c, %s, sh, '{id}', '%s', '{host}']\n    runs_on: any\n    timeout: 60s\n", d.name, script, d.mode)
		}
	}
	return harness.AgentConfig{Instance: c.instance, Workers: c.workers, QueueURL: c.queueURL, Visibility: c.visibility,
		RedisAddr: c.redisAddr, Prefix: c.prefix, Catalog: b.String(), Rules: c.rules}.YAML()
}

// limitsCheck runs `autodiag limits check` for web-1 and diagnostic and
// returns its JSON.
func limitsCheck(t *testing.T, cfgPath, diagnostic string) map[string]any {
	t.Helper()
	code, out, stderr := runCLI(t, nil, "limits", "check", "--config", cfgPath, "--host", "web-1", "--diagnostic", diagnostic)
	if code != 0 {
		t.Fatalf("limits check: exit %d: %s", code, stderr)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("limits check output: %v\n%s", err, out)
	}
	return v
}

// ruleState returns the state entry of rule in a limits check output.
func ruleState(t *testing.T, check map[string]any, rule string) map[string]any {
	t.Helper()
	states, _ := check["state"].([]any)
	for _, s := range states {
		if m, _ := s.(map[string]any); m["rule"] == rule {
			return m
		}
	}
	t.Fatalf("limits check has no state of rule %s: %v", rule, check["state"])
	return nil
}

// holders returns the task ids and lease expiries of a rule state's slots.
func holders(t *testing.T, st map[string]any) (ids []string, expires []time.Time) {
	t.Helper()
	hs, _ := st["holders"].([]any)
	for _, h := range hs {
		m, _ := h.(map[string]any)
		exp, _ := m["expires"].(map[string]any)
		at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(exp["at"]))
		if err != nil {
			t.Fatalf("holder %v: %v", m, err)
		}
		ids = append(ids, fmt.Sprint(m["task_id"]))
		expires = append(expires, at)
	}
	return ids, expires
}

const heavyRule = "    - {name: one-heavy, match: {diagnostic: [heavy, heavy-hold]}, key: host, limits: [{concurrency: 1}]}\n"

// TestConcurrencySlotOfKilledAgentFreesAfterLease: an agent killed -9
// while its diagnostic holds the host's only concurrency slot leaves the
// slot held until its lease (the visibility timeout from its last
// renewal) ends, never later; the task the other agent deferred meanwhile
// then runs there.
func TestConcurrencySlotOfKilledAgentFreesAfterLease(t *testing.T) {
	const lease = 3 * time.Second // queue.visibility_timeout, the task's lease
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	marks := newRunMarks(t)
	cfg := func(inst string) string {
		return limitRunsConfig{instance: inst, workers: 2, queueURL: fq.url, visibility: lease,
			redisAddr: testenv.RedisAddr(t), prefix: prefix, marks: marks, rules: heavyRule}.yaml()
	}
	cfgPath := sqsWriteConfig(t, cfg("cli"))
	a := startProc(t, cfg("agent-a"), fq.env...)
	fq.send(t, sqsTaskBody("h-1", "heavy-hold"))
	eventually(t, 20*time.Second, "h-1 running on agent-a", func() bool { return len(marks.read(t)) == 1 })
	ids, expires := holders(t, ruleState(t, limitsCheck(t, cfgPath, "heavy"), "one-heavy"))
	if len(ids) != 1 || ids[0] != "h-1" {
		t.Fatalf("slot holders while h-1 runs = %v, want [h-1]", ids)
	}
	first := expires[0]

	b := startProc(t, cfg("agent-b"), fq.env...)
	fq.send(t, sqsTaskBody("h-2", "heavy"))
	eventually(t, 20*time.Second, "h-2 deferred on agent-b by the concurrency cap", func() bool {
		return len(b.logsWhere("msg", "task deferred", "task_id", "h-2", "reason", "concurrency_exceeded")) > 0
	})
	// agent-a renews the slot with the lease, every third of it; each look
	// is a run of the CLI.
	eventually(t, lease+loadAllowance, "agent-a renews h-1's slot", func() bool {
		ids, expires := holders(t, ruleState(t, limitsCheck(t, cfgPath, "heavy"), "one-heavy"))
		return len(ids) == 1 && ids[0] == "h-1" && expires[0].After(first)
	})
	sqsKill9(a)
	killed := time.Now()

	ids, expires = holders(t, ruleState(t, limitsCheck(t, cfgPath, "heavy"), "one-heavy"))
	if len(ids) != 1 || ids[0] != "h-1" {
		t.Fatalf("slot holders right after the kill = %v, want [h-1] (held until its lease ends)", ids)
	}
	freeAt := expires[0]
	// Lease expiries are stored in µs.
	if late := freeAt.Sub(killed.Add(lease)); late > time.Millisecond {
		t.Fatalf("h-1's slot expires %v after the kill, later than its lease %v", freeAt.Sub(killed), lease)
	}
	if !freeAt.After(killed) {
		t.Fatalf("h-1's slot expired at %v, before the kill at %v", freeAt, killed)
	}

	// The deferred h-2 comes back no later than a deferral after the slot
	// frees: the pipeline defers at least 1s, SQS rounds visibility up to
	// whole seconds, then a receive, a claim and a decision. A loaded
	// machine may take loadAllowance more: still well short of the
	// diagnostic's 60 s timeout, which a slot held past its lease would
	// last.
	const backAfter = time.Second + time.Second + 3*time.Second
	var h2 time.Time
	eventually(t, time.Until(freeAt)+lease+backAfter+loadAllowance, "h-2 runs on agent-b after the slot frees", func() bool {
		for _, m := range marks.read(t) {
			if m.start && m.id == "h-2" {
				h2 = m.at
				return true
			}
		}
		return false
	})
	if h2.Before(freeAt) {
		t.Fatalf("h-2 started %v before h-1's slot lapsed", freeAt.Sub(h2))
	}
	// The first heavy run after the kill (h-2, or h-1's redelivery, which
	// keeps its own task's slot) starts within backAfter of the slot's end.
	for _, m := range marks.read(t)[1:] {
		if m.start {
			if m.at.After(freeAt.Add(backAfter + loadAllowance)) {
				t.Fatalf("first heavy run after the kill (%s) started %v after the slot freed, want within %v", m.id, m.at.Sub(freeAt), backAfter)
			}
			break
		}
	}
	eventually(t, 30*time.Second, "h-2 recorded as succeeded by agent-b", func() bool {
		rec, ok := sqsTaskRecord(t, rc, prefix, "h-2")
		return ok && rec.Outcome == "succeeded" && rec.Owner == "agent-b"
	})
	t.Logf("slot freed %.3fs after the kill (lease %v); h-2 started %.3fs after that",
		freeAt.Sub(killed).Seconds(), lease, h2.Sub(freeAt).Seconds())
}

// TestFleetConcurrencyOneNeverOverlaps: four agents on one Redis and one
// queue take fleetTasks tasks for one host under `concurrency: 1`; the
// diagnostics' own marks show at no instant two running, and every task
// runs exactly once.
func TestFleetConcurrencyOneNeverOverlaps(t *testing.T) {
	// Parallel: it waits ~50 s on deferred messages coming back (0.4 of a core), on its own
	// queue and Redis prefix.
	t.Parallel()
	// fleetTasks is the 200: a deferred task comes back within the
	// holder's lease (2s) at most, so they all run in well under a minute.
	const fleetTasks = 200
	_, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	marks := newRunMarks(t)
	rule := "    - {name: one-at-a-time, match: {diagnostic: [mark]}, key: host, limits: [{concurrency: 1}]}\n"
	agents := make([]*proc, 4)
	for i := range agents {
		agents[i] = startProc(t, limitRunsConfig{instance: fmt.Sprintf("fleet-%d", i), workers: 2, queueURL: fq.url,
			visibility: 2 * time.Second, redisAddr: testenv.RedisAddr(t), prefix: prefix, marks: marks, rules: rule}.yaml(), fq.env...)
	}
	bodies := make([]string, fleetTasks)
	for i := range bodies {
		bodies[i] = sqsTaskBody(fmt.Sprintf("t-%03d", i), "mark")
	}
	start := time.Now()
	fq.send(t, bodies...)
	eventually(t, 3*time.Minute, fmt.Sprintf("%d runs", fleetTasks), func() bool {
		n := 0
		for _, m := range marks.read(t) {
			if !m.start {
				n++
			}
		}
		return n >= fleetTasks
	})
	took := time.Since(start)
	eventually(t, 30*time.Second, "queue drained", func() bool { return fq.drained(t) })

	ran := map[string]int{}
	running := ""
	var prevEnd time.Time
	for i, m := range marks.read(t) {
		switch {
		case m.start && running != "":
			t.Fatalf("marks line %d: %s started while %s was running", i+1, m.id, running)
		case m.start:
			if m.at.Before(prevEnd) {
				t.Fatalf("marks line %d: %s started at %v, before the previous run ended at %v", i+1, m.id, m.at, prevEnd)
			}
			running = m.id
			ran[m.id]++
		case m.id != running:
			t.Fatalf("marks line %d: end of %s while %q was running", i+1, m.id, running)
		default:
			running, prevEnd = "", m.at
		}
	}
	if len(ran) != fleetTasks {
		t.Fatalf("%d distinct tasks ran, want %d", len(ran), fleetTasks)
	}
	for id, n := range ran {
		if n != 1 {
			t.Errorf("%s ran %d times, want 1", id, n)
		}
	}
	deferred := 0
	for _, a := range agents {
		deferred += len(a.logsWhere("msg", "task deferred", "reason", "concurrency_exceeded"))
	}
	t.Logf("%d tasks on 4 agents, concurrency 1: all ran once, none overlapping, in %.1fs; %d concurrency deferrals",
		fleetTasks, took.Seconds(), deferred)
}

// metricSum sums the series of name in p's /metrics whose labels contain
// every one of labels (e.g. `reason="failing"`).
func metricSum(p *proc, name string, labels ...string) float64 {
	p.t.Helper()
	sum := 0.0
	for _, line := range strings.Split(p.metrics(), "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		lbl, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(lbl, l)
		}
		if match {
			f, _ := strconv.ParseFloat(strings.TrimSpace(val), 64)
			sum += f
		}
	}
	return sum
}

// TestFailureBreakerOpensThroughTheBinary: runs of a failing diagnostic
// count for their rule's breaker; the failures-th opens it and the tasks
// after it end rate_limited with reason failing; `limits check` shows it
// open, and a shadow rule's would-be denials are counted and named in the
// tasks' outcome lines without denying anything.
func TestFailureBreakerOpensThroughTheBinary(t *testing.T) {
	const failures, tasks = 3, 5
	_, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	rules := fmt.Sprintf(`    - name: broken
      match: {diagnostic: [fail]}
      key: host+diagnostic
      breaker: {failures: %d, window: 10m, open_for: 30m}
    - {name: try-tighter, shadow: true, key: host, limits: [{daily: 1}]}
`, failures)
	cfg := func(inst string) string {
		// One worker: decisions and outcomes alternate, so the count of
		// runs before the breaker opens is exact.
		return limitRunsConfig{instance: inst, workers: 1, queueURL: fq.url, visibility: 2 * time.Second,
			redisAddr: testenv.RedisAddr(t), prefix: prefix, rules: rules}.yaml()
	}
	cfgPath := sqsWriteConfig(t, cfg("cli"))
	a := startProc(t, cfg("agent-a"), fq.env...)
	bodies := make([]string, tasks)
	for i := range bodies {
		bodies[i] = sqsTaskBody(fmt.Sprintf("f-%d", i), "fail")
	}
	fq.send(t, bodies...)
	eventually(t, 30*time.Second, "every task ended", func() bool { return len(a.logs("task ended")) == tasks })
	out := sqsOutcomes(a)
	if out["failed"] != failures || out["rate_limited"] != tasks-failures {
		t.Fatalf("outcomes = %v, want %d failed then %d rate_limited", out, failures, tasks-failures)
	}
	for _, l := range a.logs("task ended") {
		if l["outcome"] == "rate_limited" && l["reason"] != "failing" {
			t.Errorf("rate_limited task %v: reason %v, want failing", l["task_id"], l["reason"])
		}
		if l["rule"] != "broken" || !strings.HasPrefix(fmt.Sprint(l["shadow"]), "try-tighter:") {
			t.Errorf("task ended line %v: want rule broken and the shadow verdict", l)
		}
	}
	if got := metricSum(a, "autodiag_limiter_decisions_total", `rule="broken"`, `decision="denied"`, `reason="failing"`); got != tasks-failures {
		t.Errorf("denied/failing decisions = %v, want %d", got, tasks-failures)
	}
	// The shadow's daily: 1 allows the first task only.
	if got := metricSum(a, "autodiag_limiter_decisions_total", `rule="try-tighter"`, `decision="shadow_denied"`); got != tasks-1 {
		t.Errorf("shadow_denied decisions = %v, want %d", got, tasks-1)
	}

	check := limitsCheck(t, cfgPath, "fail")
	if check["allowed"] != false || check["reason"] != "failing" {
		t.Fatalf("limits check decision = %v, want denied, reason failing", check)
	}
	brk, _ := ruleState(t, check, "broken")["breaker"].(map[string]any)
	until, _ := brk["open_until"].(map[string]any)
	if brk["state"] != "open" || until["in_seconds"] == nil {
		t.Fatalf("limits check breaker = %v, want open with open_until", brk)
	}
	if left, _ := until["in_seconds"].(float64); left <= 0 || left > (30*time.Minute).Seconds() {
		t.Fatalf("breaker open for %vs more, want within open_for 30m", left)
	}
	code, explain, _ := runCLI(t, nil, "limits", "explain", "--config", cfgPath)
	if code != 0 || !strings.Contains(explain, "breaker: opens after 3 failed or timed_out runs within 10m0s") ||
		!strings.Contains(explain, "shadow: never denies") {
		t.Fatalf("limits explain: exit %d, want the breaker and the shadow in words:\n%s", code, explain)
	}
}
