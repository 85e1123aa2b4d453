package investigate

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/agent/report"
)

// parkedTasks is the agent with a task parked for approval: nothing is
// decided before ctx ends.
type parkedTasks struct{}

func (parkedTasks) Submit(ctx context.Context, s TaskSpec) (TaskRecord, error) {
	<-ctx.Done()
	return TaskRecord{}, fmt.Errorf("task %s: %w", s.ID, ErrAwaitingApproval)
}

// TestWallTimeEndsAnApprovalWait: the wall time ending while a call's
// task awaits a person's approval makes the call a Gap awaiting_approval
// whose reason begins approval_pending and names the task (not a generic
// error), counted under its own result; the investigation ends at
// wall_time exactly and answers.
func TestWallTimeEndsAnApprovalWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		model := &scripted{turns: []report.Response{calls("journal -"), answer("## Root cause\nslow\n")}}
		iv, m := newTest(t, Config{WallTime: 30 * time.Second}, model, nil)
		iv.o.Tasks = parkedTasks{}
		start := time.Now()
		res := iv.Run(context.Background(), parentEvidence())
		if d := time.Since(start); d != 30*time.Second {
			t.Fatalf("took %s, want wall_time 30s", d)
		}
		rec := res.Investigation
		if rec.EndedBy != endedWallTime || res.Status != report.StatusOK {
			t.Fatalf("ended by %s, status %s", rec.EndedBy, res.Status)
		}
		c := allCalls(rec)
		if len(c) != 1 || c[0].Result != ResultAwaitingApproval || !strings.HasPrefix(c[0].Reason, ReasonApprovalPending+": ") ||
			!strings.Contains(c[0].Reason, "inv-1-s1-c1") {
			t.Fatalf("calls %+v, want one awaiting_approval, approval_pending naming inv-1-s1-c1", c)
		}
		if len(rec.Gaps) != 1 || rec.Gaps[0].Result != ResultAwaitingApproval {
			t.Fatalf("gaps %+v", rec.Gaps)
		}
		if got := testutil.ToFloat64(m.calls.WithLabelValues(ResultAwaitingApproval)); got != 1 {
			t.Fatalf("tool calls{awaiting_approval} = %v, want 1", got)
		}
	})
}
