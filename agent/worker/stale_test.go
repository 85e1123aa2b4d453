package worker

import (
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/clock"
)

// TestStillOursStaleDecision: a run that would start a renewal period (a
// third of the lease) or more after its claim and decision (the agent was
// stopped between them) is not started: the message is deferred at once
// with reason stale_decision and the lease given back, so the task can be
// claimed and decided again at once; a start within the period goes ahead.
func TestStillOursStaleDecision(t *testing.T) {
	const lease = 30 * time.Second
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	src := &deferSource{}
	store := state.NewMemory(state.MemoryOptions{Clock: clk})
	w, _ := testWorker(t, Options{Source: src, Store: store, Clock: clk, Lease: lease, InstanceID: "i-1"})
	w.outcomes.received(true)
	j := &job{msg: &queue.Message{ID: "m1"}, task: task.Task{ID: "t1", Host: "h", Diagnostic: "df"}}
	claimed := clk.Now()
	if _, ok := w.pipeline.claim(j); !ok || !j.leased {
		t.Fatalf("claim: ok %v, leased %v", ok, j.leased)
	}
	clk.Add(lease/3 - time.Millisecond)
	if !w.pipeline.stillOurs(j, claimed) {
		t.Fatal("a start within a renewal period of the claim was not made")
	}
	clk.Add(time.Millisecond)
	if w.pipeline.stillOurs(j, claimed) {
		t.Fatal("a start a renewal period after the claim was made")
	}
	if len(src.delays) != 1 || src.delays[0] != 0 {
		t.Errorf("Defer calls %v, want one at once", src.delays)
	}
	audit, err := store.RecentAudit(t.Context(), 10)
	if err != nil || len(audit) != 1 || audit[0].Outcome != "deferred" || audit[0].Reason != reasonStaleDecision {
		t.Errorf("audit %+v (%v), want one deferred, %s", audit, err, reasonStaleDecision)
	}
	if c, err := store.Claim(t.Context(), state.TaskRecord{ID: "t1"}, "i-2", lease); err != nil || c.Result != state.Claimed {
		t.Errorf("another agent's claim: %+v %v, want claimed (the lease given back)", c.Result, err)
	}
}
