package main

import (
	"testing"
	"time"
)

// TestCheckTarget: a run on another agent than its host's is counted; the
// hand-off delays come from the task-ended lines that carry one; the tasks
// of a leaving host are counted by how they ended, and one that ended
// unrun otherwise than rejected with a departed reason (or rate limited)
// is caught.
func TestCheckTarget(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	r := &fleetRun{o: fleetOpts{runsOn: runsOnTarget}, t0: t0, agents: []*fleetAgent{
		{inst: "i-0"}, {inst: "i-1", role: "scaled_in"}, {inst: "i-2", role: "killed"},
	}}
	r.sent = []sentTask{
		{id: "a", host: nodeName(0)}, {id: "b", host: nodeName(0)}, // stays: run on i-0, then on i-1 (wrong)
		{id: "c", host: nodeName(1)}, {id: "d", host: nodeName(1)}, {id: "e", host: nodeName(1)}, // scaled in
		{id: "f", host: nodeName(2)}, {id: "g", host: nodeName(2)}, // killed
	}
	runs := []markRun{
		{id: "a", host: nodeName(0), inst: "i-0"},
		{id: "b", host: nodeName(0), inst: "i-1"},
		{id: "c", host: nodeName(1), inst: "i-1"},
	}
	lines := []endedLine{
		{id: "a", outcome: "succeeded", handoff: 0.2},
		{id: "b", outcome: "succeeded"},
		{id: "c", outcome: "succeeded", handoff: 0.6},
		{id: "x", outcome: "succeeded", handoff: 40, role: "frozen"},
		{id: "d", outcome: "released", reason: "drain"},
		{id: "d", outcome: "rejected", reason: "target_draining"},
		{id: "e", outcome: "rejected", reason: "ambiguous_host"},
		{id: "f", outcome: "rejected", reason: "no_agent_for_host"},
		{id: "g", outcome: "rate_limited", reason: "daily_exceeded"},
	}
	tr := checkTarget(r, runs, lines)
	if tr.WrongMachine != 1 {
		t.Errorf("runs on another machine %d, want 1 (b on i-1)", tr.WrongMachine)
	}
	if tr.Handed != 2 || tr.HandoffP50 != 0.2 || tr.HandoffP99 != 0.6 || tr.FrozenHanded != 1 || tr.FrozenMax != 40 {
		t.Errorf("handed %d, p50 %v, p99 %v, to the frozen agent %d (max %v); want 2, 0.2, 0.6, and 1 (40) apart",
			tr.Handed, tr.HandoffP50, tr.HandoffP99, tr.FrozenHanded, tr.FrozenMax)
	}
	want := map[string]int{"run": 1, "rejected target_draining": 1, "rejected ambiguous_host": 1, "rejected no_agent_for_host": 1, "rate_limited": 1}
	for k, n := range want {
		if tr.Departed[k] != n {
			t.Errorf("departed %v: %s = %d, want %d", tr.Departed, k, tr.Departed[k], n)
		}
	}
	if tr.DepartedBad != 1 {
		t.Errorf("departed tasks ending otherwise %d, want 1 (e: ambiguous_host)", tr.DepartedBad)
	}
}
