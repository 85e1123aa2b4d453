package main

import (
	"fmt"
	"slices"
	"strings"
)

// Host-local diagnostics at fleet scale (issue 45): with -runs-on target
// every task names one agent's machine (node-NNN, given to that agent in
// AUTODIAG_HOST_NAMES, its canonical name) and its diagnostic is runs_on
// target, so a task received by another agent is handed to its host's
// agent. -runs-on any sends the same tasks to a catalog that probes
// {host} (runs wherever received): the baseline the hand-off's SQS and
// Redis cost is compared with. The default ("") is the workload before
// issue 45: hosts host-NN that no agent owns.
const (
	runsOnDefault = ""
	runsOnAny     = "any"
	runsOnTarget  = "target"
)

// Reasons a target task whose host's agent is leaving ends rejected with
// (agent/worker: ReasonDraining, ReasonNoAgent).
var departedReasons = []string{"target_draining", "no_agent_for_host"}

// nodeName is agent i's canonical host name in the -runs-on modes.
func nodeName(i int) string { return fmt.Sprintf("node-%03d", i) }

// targetRes is what -runs-on target shows: every run on its target's
// machine, the hand-off delay, and how the tasks of leaving machines end.
type targetRes struct {
	RunsOn string `json:"runs_on"`
	// WrongMachine counts runs whose instance is not the agent that owns
	// the task's host: must be 0 with runs_on target.
	WrongMachine int `json:"runs_on_another_machine"`
	// Handed counts the task-ended lines with a hand-off delay: tasks run
	// on their host's agent after another agent received them. The
	// delays are those of every owner but the frozen one: a task handed to
	// it while it is stopped (SIGSTOP) starts once it resumes, which
	// measures the freeze (FrozenHanded, FrozenMax).
	Handed       int     `json:"handed_and_run"`
	HandoffP50   float64 `json:"handoff_p50_seconds"`
	HandoffP99   float64 `json:"handoff_p99_seconds"`
	HandoffMax   float64 `json:"handoff_max_seconds"`
	FrozenHanded int     `json:"handed_to_the_frozen_agent"`
	FrozenMax    float64 `json:"handoff_to_the_frozen_agent_max_seconds"`
	// HandOffs are the task hand-offs (GiveTask's MULTI/EXEC, the
	// lifecycle notices' ones included): a task is handed again each time it
	// comes back through the queue to an agent other than its host's
	// (a limiter deferral, a lapsed visibility).
	HandOffs int64 `json:"hand_offs"`
	// Departed is how the tasks for the hosts of scaled-in and killed
	// agents ended: "run", an outcome, or "rejected REASON".
	Departed map[string]int `json:"departed_hosts_tasks"`
	// DepartedBad counts those that ended unrun otherwise than rejected
	// with a departed reason or rate limited.
	DepartedBad int `json:"departed_hosts_tasks_other_end"`
	// StreamPerHanded is the hand-off's own Redis commands (the task
	// streams: xadd, xread, xdel) per handed task.
	StreamPerHanded map[string]float64 `json:"stream_commands_per_handed_task"`
}

// ended is one task-ended line of an agent, as the checks read it.
type endedLine struct {
	id, outcome, reason string
	handoff             float64 // 0: not handed
	role                string  // of the agent that logged it
}

// checkTarget computes targetRes from the marks, the task-ended lines and
// the sent tasks.
func checkTarget(r *fleetRun, runs []markRun, lines []endedLine) targetRes {
	tr := targetRes{RunsOn: r.o.runsOn, Departed: map[string]int{}}
	owner := map[string]*fleetAgent{}
	for i, fa := range r.agents {
		owner[nodeName(i)] = fa
	}
	ran := map[string]bool{}
	for _, rn := range runs {
		ran[rn.id] = true
		if fa := owner[rn.host]; fa == nil || fa.inst != rn.inst {
			tr.WrongMachine++
		}
	}
	var delays []float64
	final := map[string]endedLine{}
	for _, l := range lines {
		switch {
		case l.handoff > 0 && l.role == "frozen":
			tr.FrozenHanded++
			tr.FrozenMax = max(tr.FrozenMax, l.handoff)
		case l.handoff > 0:
			delays = append(delays, l.handoff)
		}
		if finalOutcomes[l.outcome] {
			if _, seen := final[l.id]; !seen || l.outcome == "rejected" {
				final[l.id] = l
			}
		}
	}
	tr.Handed = len(delays)
	tr.HandoffP50, tr.HandoffP99, tr.HandoffMax = quantile(delays, 0.5), quantile(delays, 0.99), quantile(delays, 1)
	for _, st := range r.sent {
		fa := owner[st.host]
		if fa == nil || (fa.role != "scaled_in" && fa.role != "killed") {
			continue
		}
		f, ok := final[st.id]
		switch {
		case ran[st.id]:
			tr.Departed["run"]++
		case !ok:
			tr.Departed["no end"]++ // counted as lost by the lost check
		case f.outcome == "rejected":
			tr.Departed["rejected "+f.reason]++
			if !slices.Contains(departedReasons, f.reason) {
				tr.DepartedBad++
			}
		default:
			tr.Departed[f.outcome]++
			if f.outcome != "rate_limited" {
				tr.DepartedBad++
			}
		}
	}
	if r.redis != nil && tr.Handed > 0 {
		tr.StreamPerHanded = map[string]float64{}
		for cmd, c := range r.redis.Run.ByCommand {
			if strings.HasPrefix(cmd, "x") {
				tr.StreamPerHanded[cmd] = float64(c.Calls) / float64(tr.Handed+tr.FrozenHanded)
			}
		}
		// Each hand-off is one MULTI/EXEC (GiveTask: XADD and PEXPIRE);
		// the XADDs also count the audit stream's, one per finish.
		tr.HandOffs = r.redis.Run.ByCommand["exec"].Calls
	}
	return tr
}
