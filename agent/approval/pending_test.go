package approval

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/clock"
)

// autodiag_approvals_pending counts the tasks parked and not decided
// yet, fleet-wide: it drops at the decision, also when the send on fails
// (a decided task is no longer waiting for a person) and when another
// agent decided (each agent's count is the store's, never an increment
// that drifts); an agent that only parked catches up at its next sweep.
func TestApprovalsPendingIsTheUndecidedCount(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewManual(time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC))
			q := &queueStub{down: true}
			parker, err := New(Options{Store: s, Send: q.send, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			decider, err := New(Options{Store: s, Send: q.send, Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"p1", "p2"} {
				if ap, err := parker.Gate(ctx, task.Task{ID: id, Diagnostic: "heapdump", Host: "web-1"}, []byte(id), 10*time.Minute); err != nil || ap != nil {
					t.Fatalf("Gate %s: %+v %v", id, ap, err)
				}
			}
			if got := testutil.ToFloat64(parker.pending); got != 2 {
				t.Fatalf("parker's gauge after two parks = %v, want 2", got)
			}
			// Decided by the other agent, with the queue down: not sent on.
			if err := decider.Decide(ctx, "p1", Decision{Approve: true, By: "ana", Via: ViaAPI}); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(decider.pending); got != 1 {
				t.Fatalf("decider's gauge after its decision = %v, want 1 (p2 undecided)", got)
			}
			if err := decider.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(decider.pending); got != 1 {
				t.Fatalf("decider's gauge after a sweep with p1 not sent on = %v, want 1", got)
			}
			if err := parker.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(parker.pending); got != 1 {
				t.Fatalf("parker's gauge after its sweep = %v, want 1", got)
			}
			// p2's deadline: decided timeout, none pending.
			clk.Add(10 * time.Minute)
			if err := parker.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			if got := testutil.ToFloat64(parker.pending); got != 0 {
				t.Fatalf("gauge after p2 timed out = %v, want 0", got)
			}
		})
	}
}
