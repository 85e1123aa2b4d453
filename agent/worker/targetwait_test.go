package worker

import (
	"fmt"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
)

// TestTargetWaitBacksOff: a target task whose host no live agent owns
// comes back after targetWaitRecheck, then after as long as it has
// waited, at most targetWaitRecheckMax, and ends rejected
// no_agent_for_host exactly at queue.target_wait after its creation,
// never run. Over the default 2m it comes back at most half as often as
// every targetWaitRecheck would (each return is a receive and a
// visibility change). An agent of the host that comes up during the wait
// gets the task at its next return, within targetWaitRecheckMax.
func TestTargetWaitBacksOff(t *testing.T) {
	const wait = 2 * time.Minute
	catalog := map[string]runner.Diagnostic{"df": {Name: "df", Command: []string{"/usr/bin/df"}}}
	created := time.Unix(1_800_000_000, 0)
	for _, tt := range []struct {
		name      string
		firstSeen time.Duration // first receive, since creation
		ownerAt   time.Duration // the host's agent comes up; 0 = never
	}{
		{"received at once", 0, 0},
		{"received after a lapsed hand-off", 30 * time.Second, 0},
		{"received late", wait - 5*time.Second, 0},
		{"the host's agent comes up", 0, 45 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewManual(created.Add(tt.firstSeen))
			src := &placeSource{}
			store := state.NewMemory(state.MemoryOptions{Clock: clk})
			hosts := &fakeHosts{given: map[string][]string{}, owners: map[string]state.HostOwner{}}
			w, _ := testWorker(t, Options{Source: src, Store: store, Clock: clk, Lease: 30 * time.Second, InstanceID: "i-me",
				Catalog: catalog, Hooks: noHooks{}, Placement: Placement{Names: []string{"me.example"}, Hosts: hosts, TargetWait: wait}})
			w.outcomes.received(true)
			for n := 1; ; n++ {
				if tt.ownerAt > 0 && clk.Now().Sub(created) >= tt.ownerAt {
					hosts.owners["booted"] = state.HostOwner{ID: "i-booted", State: "running"}
				}
				msg := &queue.Message{ID: "m1", Handle: fmt.Sprintf("rh-%d", n), ReceiveCount: n, Body: []byte(`{"id":"t1"}`)}
				j := &job{msg: msg, received: clk.Now(), task: task.Task{ID: "t1", Host: "booted", Diagnostic: "df", CreatedAt: created}}
				if !w.pipeline.place(j) {
					t.Fatal("the task runs here; want it never run off its host")
				}
				if len(src.delays) < n {
					break // ended or handed
				}
				d := src.delays[n-1]
				waited := clk.Now().Sub(created)
				if d > targetWaitRecheckMax || d > wait-waited || d < min(targetWaitRecheck, wait-waited) {
					t.Fatalf("return %d after %s of waiting: hidden %s; want targetWaitRecheck %s to targetWaitRecheckMax %s, ending by target_wait %s",
						n, waited, d, targetWaitRecheck, targetWaitRecheckMax, wait)
				}
				clk.Add(d)
			}
			waited := clk.Now().Sub(created)
			if tt.firstSeen == 0 && len(src.delays) > 0 && src.delays[0] != targetWaitRecheck {
				t.Errorf("first deferral %s, want targetWaitRecheck %s: an agent that boots soon is found soon", src.delays[0], targetWaitRecheck)
			}
			rec, recorded, _ := store.Task(t.Context(), "t1")
			if tt.ownerAt > 0 {
				if len(hosts.given["i-booted"]) != 1 || recorded {
					t.Errorf("handed %d times, recorded %v; want handed once to the agent that came up, no record here", len(hosts.given["i-booted"]), recorded)
				}
				if late := waited - tt.ownerAt; late > targetWaitRecheckMax {
					t.Errorf("handed %s after the host's agent came up, want within targetWaitRecheckMax %s", late, targetWaitRecheckMax)
				}
				return
			}
			if waited != wait || !recorded || rec.Outcome != outcome.Rejected || rec.Reason != ReasonNoAgent || src.deleted != 1 {
				t.Errorf("ended after %s as %s %s (recorded %v, deletes %d); want rejected %s exactly at target_wait %s, deleted",
					waited, rec.Outcome, rec.Reason, recorded, src.deleted, ReasonNoAgent, wait)
			}
			if most := int(wait / targetWaitRecheck / 2); tt.firstSeen == 0 && len(src.delays) > most {
				t.Errorf("came back %d times over target_wait %s (%v); want at most %d, half of one every targetWaitRecheck %s",
					len(src.delays), wait, src.delays, most, targetWaitRecheck)
			}
		})
	}
}
