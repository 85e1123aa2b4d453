package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/harness"
	"github.com/autodiag/autodiag/internal/testenv"
)

// targetFleet starts n agents on one queue and one Redis, agent-i
// answering for host-i.example (AUTODIAG_HOST_NAMES), each with the
// catalog entry whoami (no {host}: runs_on target by default) printing
// its own instance id, so an output says which agent ran it.
func targetFleet(t *testing.T, n int, targetWait time.Duration) (*redis.Client, string, *sqsFake, []*proc) {
	t.Helper()
	return targetFleetLedger(t, n, targetWait, "")
}

// targetFleetLedger is targetFleet whose whoami also appends the task id
// to the file ledger (when set), a line per execution.
func targetFleetLedger(t *testing.T, n int, targetWait time.Duration, ledger string) (*redis.Client, string, *sqsFake, []*proc) {
	t.Helper()
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	var agents []*proc
	for i := range n {
		inst := fmt.Sprintf("agent-%d", i)
		whoami := fmt.Sprintf("  - name: whoami\n    command: [/bin/echo, '%s']\n    timeout: 10s\n", inst)
		if ledger != "" {
			whoami = fmt.Sprintf("  - name: whoami\n    command: [/bin/sh, -c, 'echo \"$1\" >> %s; /bin/sleep 0.1; echo %s', sh, '{id}']\n    timeout: 10s\n",
				ledger, inst)
		}
		cfg := harness.AgentConfig{Instance: inst, Workers: 4, QueueURL: fq.url, Visibility: 3 * time.Second,
			RedisAddr: testenv.RedisAddr(t), Prefix: prefix, TargetWait: targetWait, Catalog: whoami}
		agents = append(agents, startProc(t, cfg.YAML(), append(fq.env, fmt.Sprintf("AUTODIAG_HOST_NAMES=host-%d.example", i))...))
	}
	// Each agent's names are in Redis once it has written its record.
	eventually(t, 20*time.Second, "every agent's host name published", func() bool {
		for i := range n {
			if rc.Exists(t.Context(), fmt.Sprintf("%shostname:host-%d.example", prefix, i)).Val() == 0 {
				return false
			}
		}
		return true
	})
	return rc, prefix, fq, agents
}

func whoamiBody(id, host string) string {
	return fmt.Sprintf(`{"id":%q,"host":%q,"diagnostic":"whoami"}`, id, host)
}

// TestTargetTasksRunOnTheirHost: 60 host-local tasks for the three agents'
// hosts, in mixed order on one queue, each run by the agent of its host,
// whichever agent received it: every output (the running agent's own id)
// equals the target, every record's owner is the target's agent, the
// lease was taken once (attempt 1), and tasks were handed between agents.
func TestTargetTasksRunOnTheirHost(t *testing.T) {
	rc, prefix, fq, agents := targetFleet(t, 3, 0)
	const tasks = 60
	var bodies []string
	want := map[string]string{}
	for i := range tasks {
		id := fmt.Sprintf("w-%02d", i)
		k := (i * 7) % 3
		want[id] = fmt.Sprintf("agent-%d", k)
		bodies = append(bodies, whoamiBody(id, fmt.Sprintf("host-%d.example", k)))
	}
	fq.send(t, bodies...)
	eventually(t, 60*time.Second, "every task recorded and every message deleted", func() bool {
		for id := range want {
			if rec, ok := sqsTaskRecord(t, rc, prefix, id); !ok || rec.Outcome == "" {
				return false
			}
		}
		return fq.drained(t)
	})
	for id, agent := range want {
		rec, _ := sqsTaskRecord(t, rc, prefix, id)
		if rec.Outcome != "succeeded" || strings.TrimSpace(rec.Output) != agent || rec.Owner != agent || rec.Attempts != 1 {
			t.Errorf("task %s for %s's host: outcome %s, output %q, owner %s, attempts %d; want succeeded, run once by %s",
				id, agent, rec.Outcome, strings.TrimSpace(rec.Output), rec.Owner, rec.Attempts, agent)
		}
	}
	handed, succeeded, received, handoffs := 0.0, 0, 0.0, 0.0
	for _, a := range agents {
		m := a.metrics()
		handed += harness.Series(m, "autodiag_task_routing_total", `result="handed"`)
		received += harness.Series(m, "autodiag_tasks_received_total", "")
		handoffs += harness.Series(m, "autodiag_task_handoff_seconds_count", "")
		succeeded += sqsOutcomes(a)["succeeded"]
	}
	if handed == 0 {
		t.Error("no task was handed between agents; the test shows nothing about routing")
	}
	// Each handed task that ran started once on its owner, which observed
	// its hand-off delay; a task handed twice (a redelivery) runs once.
	if handoffs < 1 || handoffs > handed {
		t.Errorf("%v hand-off delays observed for %v hand-offs; want between 1 and %v", handoffs, handed, handed)
	}
	if succeeded != tasks {
		t.Errorf("%d succeeded outcomes across the fleet, want %d (one per task)", succeeded, tasks)
	}
	_, _, _, st := fq.stats(t)
	if st.Deleted != tasks {
		t.Errorf("queue stats %+v: want %d deleted", st, tasks)
	}
	// A handed task counts as received at the agent that received it from
	// the queue, not again at its owner.
	if int(received) != st.Received {
		t.Errorf("autodiag_tasks_received_total sums to %v over the fleet, want the queue's %d deliveries (%v hand-offs)", received, st.Received, handed)
	}
}

// TestTargetTaskWithoutItsAgent: a host-local task for a host no agent
// answers for waits queue.target_wait and ends rejected no_agent_for_host,
// unrun; one for a drained agent's host ends rejected target_draining.
func TestTargetTaskWithoutItsAgent(t *testing.T) {
	const wait = 2 * time.Second
	rc, prefix, fq, agents := targetFleet(t, 2, wait)
	sent := time.Now()
	fq.send(t, whoamiBody("ghost-1", "ghost.example"))
	eventually(t, 30*time.Second, "the task for an unknown host ended", func() bool {
		rec, ok := sqsTaskRecord(t, rc, prefix, "ghost-1")
		return ok && rec.Outcome != ""
	})
	rec, _ := sqsTaskRecord(t, rc, prefix, "ghost-1")
	if rec.Outcome != "rejected" || rec.Reason != "no_agent_for_host" || rec.Output != "" || rec.ExitCode == nil || *rec.ExitCode != -1 {
		t.Errorf("task for an unknown host: %+v; want rejected no_agent_for_host, unrun", rec)
	}
	if !rec.FinishedAt.After(sent.Add(wait)) {
		t.Errorf("ended at %s, before queue.target_wait %s after it was sent at %s", rec.FinishedAt, wait, sent)
	}

	// agent-1 drains and exits; its record says drained while it lasts.
	sqsDrainAll(t, agents[1])
	fq.send(t, whoamiBody("drained-1", "host-1.example"))
	eventually(t, 30*time.Second, "the task for the drained agent's host ended", func() bool {
		rec, ok := sqsTaskRecord(t, rc, prefix, "drained-1")
		return ok && rec.Outcome != ""
	})
	rec, _ = sqsTaskRecord(t, rc, prefix, "drained-1")
	if rec.Outcome != "rejected" || rec.Reason != "target_draining" || rec.Output != "" || rec.Owner != "agent-0" {
		t.Errorf("task for a drained agent's host: %+v; want rejected target_draining by agent-0, unrun", rec)
	}
	if n := harness.Series(agents[0].metrics(), "autodiag_task_routing_total", `result="target_draining"`); n != 1 {
		t.Errorf("agent-0 counted %v target_draining, want 1", n)
	}
}

// TestTargetHandoffSurvivesKill9: agent-0 receives its share of 60 tasks
// for agent-1's and agent-2's hosts and hands them over; it is killed
// with SIGKILL mid-stream. Every task still runs exactly once (a line per
// execution in the ledger), on its target's agent, attempt 1: a message
// agent-0 held unhanded comes back through the queue once its visibility
// lapses, and one it handed is held by the owner.
func TestTargetHandoffSurvivesKill9(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger")
	rc, prefix, fq, agents := targetFleetLedger(t, 3, time.Minute, ledger)
	const tasks = 60
	want := map[string]string{}
	var bodies []string
	for i := range tasks {
		id := fmt.Sprintf("k-%02d", i)
		k := 1 + (i*7)%2
		want[id] = fmt.Sprintf("agent-%d", k)
		bodies = append(bodies, whoamiBody(id, fmt.Sprintf("host-%d.example", k)))
	}
	fq.send(t, bodies...)
	eventually(t, 30*time.Second, "agent-0 handed a task", func() bool {
		return harness.Series(agents[0].metrics(), "autodiag_task_routing_total", `result="handed"`) > 0
	})
	sqsKill9(agents[0])
	done := 0
	for id := range want {
		if rec, ok := sqsTaskRecord(t, rc, prefix, id); ok && rec.Outcome != "" {
			done++
		}
	}
	if done == tasks {
		t.Fatal("every task had ended before agent-0 was killed; the test shows nothing about a kill mid-stream")
	}
	t.Logf("%d of %d tasks had ended when agent-0 was killed", done, tasks)
	eventually(t, 90*time.Second, "every task recorded and every message deleted", func() bool {
		for id := range want {
			if rec, ok := sqsTaskRecord(t, rc, prefix, id); !ok || rec.Outcome == "" {
				return false
			}
		}
		return fq.drained(t)
	})
	runs := map[string]int{}
	b, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Fields(string(b)) {
		runs[line]++
	}
	for id, agent := range want {
		rec, _ := sqsTaskRecord(t, rc, prefix, id)
		if runs[id] != 1 || rec.Outcome != "succeeded" || strings.TrimSpace(rec.Output) != agent || rec.Owner != agent || rec.Attempts != 1 {
			t.Errorf("task %s for %s's host: ran %d times, outcome %s, output %q, owner %s, attempts %d; want run once by %s",
				id, agent, runs[id], rec.Outcome, strings.TrimSpace(rec.Output), rec.Owner, rec.Attempts, agent)
		}
	}
	if len(runs) != tasks {
		t.Errorf("the ledger holds %d task ids, want %d", len(runs), tasks)
	}
}

// TestEmbeddedNotThisHost: one agent alone (no Redis) answering for no
// web-01.example.com refuses a host-local task for it at POST /v1/tasks
// with 400 not_this_host, naming the names it answers for, and counts it;
// a probe of {host} (runs_on any) and a task for one of its names are
// taken.
func TestEmbeddedNotThisHost(t *testing.T) {
	p := startProc(t, "instance_id: vm-1\nadmin_addr: 127.0.0.1:0\n", "AUTODIAG_HOST_NAMES=box.example")
	code, out := p.post("/v1/tasks", `{"id":"nt-1","host":"web-01.example.com","diagnostic":"uptime"}`)
	names, _ := out["host_names"].([]any)
	if code != http.StatusBadRequest || out["reason"] != "not_this_host" || !slices.Contains(names, any("box.example")) || !slices.Contains(names, any("vm-1")) {
		t.Fatalf("uptime for another host: %d %v; want 400 not_this_host naming box.example and vm-1", code, out)
	}
	if !strings.Contains(out["error"].(string), "box.example") {
		t.Errorf("the error %q does not name the agent's names", out["error"])
	}
	if code, out := p.post("/v1/tasks", `{"id":"nt-2","host":"web-01.example.com","diagnostic":"dns-lookup"}`); code != http.StatusAccepted {
		t.Errorf("a probe of {host} (runs_on any): %d %v; want 202", code, out)
	}
	if code, out := p.post("/v1/tasks", `{"id":"nt-3","host":"Box.Example.","diagnostic":"uptime"}`); code != http.StatusAccepted {
		t.Errorf("uptime for one of its own names, written otherwise: %d %v; want 202", code, out)
	}
	if n := harness.Series(p.metrics(), "autodiag_task_routing_total", `result="not_this_host"`); n != 1 {
		t.Errorf("autodiag_task_routing_total{result=not_this_host} = %v, want 1", n)
	}
}

// TestTargetOneQuotaPerMachine: tasks naming one instance by its address
// (an IP literal, accepted with allow_ip_literals off because an agent
// answers for it), its DNS name and its instance id, received by either
// of two agents, all run on that instance's agent under its canonical
// name (its first), the name each came with kept beside it, and share one
// daily quota of 3 per host: 3 succeed, 3 are rate_limited. An address no
// agent answers for stays refused.
func TestTargetOneQuotaPerMachine(t *testing.T) {
	rc, prefix := sqsRedis(t)
	fq := newSQSFake(t, "tasks")
	rules := "    - name: per-machine\n      match: {diagnostic: [whoami]}\n      key: host\n      limits: [{daily: 3}]\n"
	var agents []*proc
	for i, names := range []string{"box-0.example,10.0.1.5", "box-1.example"} {
		inst := fmt.Sprintf("agent-%d", i)
		cfg := harness.AgentConfig{Instance: inst, Workers: 2, QueueURL: fq.url, Visibility: 3 * time.Second,
			RedisAddr: testenv.RedisAddr(t), Prefix: prefix, Rules: rules,
			Catalog: fmt.Sprintf("  - name: whoami\n    command: [/bin/echo, '%s']\n    timeout: 10s\n", inst)}
		agents = append(agents, startProc(t, cfg.YAML(), append(fq.env, "AUTODIAG_HOST_NAMES="+names)...))
	}
	eventually(t, 20*time.Second, "both agents' names published", func() bool {
		return rc.Exists(t.Context(), prefix+"hostname:10.0.1.5", prefix+"hostname:box-1.example").Val() == 2
	})
	sent := map[string]string{"q-1": "10.0.1.5", "q-2": "box-0.example", "q-3": "agent-0", "q-4": "10.0.1.5", "q-5": "box-0.example", "q-6": "agent-0"}
	var bodies []string
	for id, host := range sent {
		bodies = append(bodies, whoamiBody(id, host))
	}
	fq.send(t, bodies...)
	eventually(t, 30*time.Second, "every task recorded", func() bool {
		for id := range sent {
			if rec, ok := sqsTaskRecord(t, rc, prefix, id); !ok || rec.Outcome == "" {
				return false
			}
		}
		return true
	})
	outcomes := map[string]int{}
	for id, host := range sent {
		rec, _ := sqsTaskRecord(t, rc, prefix, id)
		outcomes[rec.Outcome]++
		wantAsSent := host
		if host == "box-0.example" {
			wantAsSent = ""
		}
		if rec.Host != "box-0.example" || rec.HostAsSent != wantAsSent || rec.Owner != "agent-0" {
			t.Errorf("task %s sent for %s: host %q as sent %q, owner %s; want box-0.example as sent %q, on agent-0",
				id, host, rec.Host, rec.HostAsSent, rec.Owner, wantAsSent)
		}
		if rec.Outcome == "succeeded" && strings.TrimSpace(rec.Output) != "agent-0" {
			t.Errorf("task %s ran on %q, want agent-0", id, strings.TrimSpace(rec.Output))
		}
	}
	if outcomes["succeeded"] != 3 || outcomes["rate_limited"] != 3 {
		t.Errorf("outcomes %v; want 3 succeeded and 3 rate_limited: one daily quota of 3 for the machine", outcomes)
	}
	code, out := agents[1].post("/v1/tasks", whoamiBody("q-7", "10.9.9.9"))
	if code != http.StatusBadRequest || out["reason"] != "ip_literal_not_allowed" {
		t.Errorf("an address no agent answers for: %d %v; want 400 ip_literal_not_allowed", code, out)
	}
}
