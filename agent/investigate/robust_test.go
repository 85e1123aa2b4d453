package investigate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/internal/clock"
)

// flaky answers 429 (with a Retry-After of 0) at the requests listed, and
// otherwise passes to the script.
type flaky struct {
	*scripted
	mu      sync.Mutex
	n       int
	failAt  map[int]bool
	refused int
}

func (f *flaky) Complete(ctx context.Context, req report.Request) (report.Response, error) {
	f.mu.Lock()
	f.n++
	fail := f.failAt[f.n]
	if fail {
		f.refused++
	}
	f.mu.Unlock()
	if fail {
		return report.Response{}, &report.Error{Provider: "scripted", StatusCode: 429, Err: fmt.Errorf("slow down")}
	}
	return f.scripted.Complete(ctx, req)
}

// TestLoopRetries429: a 429 in the middle of the loop is retried with the
// report's backoff and the investigation completes; the step records the
// attempts.
func TestLoopRetries429(t *testing.T) {
	model := &flaky{scripted: &scripted{turns: []report.Response{calls("journal -"), calls("journal -"), answer("log")}},
		failAt: map[int]bool{2: true, 3: true}}
	tasks := newFakeTasks(testTools, map[string]string{"journal": "ok\n"})
	iv, _ := newTest(t, Config{}, nil, tasks)
	iv.o.Provider, iv.o.Backoff = model, time.Millisecond
	res := iv.Run(context.Background(), parentEvidence())
	if res.Status != report.StatusOK || res.Investigation.EndedBy != endedAnswer || model.refused != 2 {
		t.Fatalf("status %s (%s) ended by %s, %d refused", res.Status, res.Reason, res.Investigation.EndedBy, model.refused)
	}
	if st := res.Investigation.Steps; len(st) != 3 || st[1].Attempts != 3 {
		t.Fatalf("steps %+v, want the second with 3 attempts", st)
	}
}

// TestHardDailyCap: with daily_tokens_hard, five alerts in a row never
// spend past the cap: each call reserves an estimate first, a call the cap
// has no room for is not made, and the investigations past it end
// daily_budget.
func TestHardDailyCap(t *testing.T) {
	const capTokens = 12000
	budget := NewMemoryBudget(capTokens, 0, nil)
	ended := map[string]int{}
	for i := range 5 {
		turns := []report.Response{calls("journal -"), calls("journal -"), answer("log")}
		for j := range turns {
			turns[j].InputTokens, turns[j].OutputTokens = 1500, 300
		}
		model := &scripted{turns: turns}
		tasks := newFakeTasks(testTools, map[string]string{"journal": "ok\n"})
		iv, _ := newTest(t, Config{DailyTokens: capTokens, DailyTokensHard: true}, model, tasks)
		iv.o.Budget = budget
		iv.o.NewID = func() string { return fmt.Sprintf("inv-%d", i) }
		res := iv.Run(context.Background(), parentEvidence())
		ended[res.Investigation.EndedBy]++
		used, _, _ := budget.Used(context.Background())
		if used > capTokens {
			t.Fatalf("alert %d: %d tokens spent, cap %d", i+1, used, capTokens)
		}
		if res.Status == report.StatusFailed && !strings.Contains(res.Reason, "daily token cap") {
			t.Fatalf("alert %d failed: %s", i+1, res.Reason)
		}
	}
	if ended[endedDailyBudget] == 0 || ended[endedAnswer] == 0 {
		t.Fatalf("ended by %v, want some answered and some stopped by the daily cap", ended)
	}
}

// TestToolCallOnlyLastTurn: a last turn that asks for tools (none are
// offered) gets one more turn; when that asks again the report fails.
func TestToolCallOnlyLastTurn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		turns  []report.Response
		status string
	}{
		{"answers on the extra turn", []report.Response{calls("journal -"), calls("journal -"), answer("log")}, report.StatusOK},
		{"asks again", []report.Response{calls("journal -"), calls("journal -"), calls("journal -")}, report.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			model := &scripted{turns: tc.turns}
			tasks := newFakeTasks(testTools, map[string]string{"journal": "ok\n"})
			iv, _ := newTest(t, Config{MaxSteps: 1}, model, tasks)
			res := iv.Run(context.Background(), parentEvidence())
			if res.Status != tc.status || len(model.reqs) != 3 {
				t.Fatalf("status %s (%s) after %d requests", res.Status, res.Reason, len(model.reqs))
			}
			if last := model.reqs[2].Messages; !strings.Contains(last[len(last)-1].Text, "No diagnostic can run any more") {
				t.Fatalf("the extra turn says %q", last[len(last)-1].Text)
			}
		})
	}
}

// TestHostileModelBounded: a model making thousands of calls a turn and
// calls with a 200 KB parameter name gets a record, and sends requests,
// of bounded size: the calls past what a step keeps are counted, every
// stored string is cut, and each request stays within context_bytes.
func TestHostileModelBounded(t *testing.T) {
	many := make([]string, 6000)
	for i := range many {
		many[i] = "journal -"
	}
	huge := strings.Repeat("p", 200<<10)
	big := calls("journal -")
	in, _ := json.Marshal(map[string]string{huge: "v", "host": strings.Repeat("h", 300)})
	big.ToolCalls = append(big.ToolCalls, report.ToolCall{ID: strings.Repeat("i", 5000), Name: strings.Repeat("n", 5000), Input: in},
		report.ToolCall{ID: "x", Name: "journal", Input: in})
	var turns []report.Response
	for range 5 {
		turns = append(turns, calls(many...), big)
	}
	model := &scripted{turns: append(turns, answer(huge))}
	tasks := newFakeTasks(testTools, map[string]string{"journal": strings.Repeat("log line\n", 3000)})
	const ctxBytes = 16 << 10
	iv, _ := newTest(t, Config{MaxSteps: 10, ContextBytes: ctxBytes}, model, tasks)
	res := iv.Run(context.Background(), parentEvidence())
	if res.Status != report.StatusOK {
		t.Fatalf("status %s: %s", res.Status, res.Reason)
	}
	rec, _ := json.Marshal(res)
	if len(rec) > 160<<10 || res.Investigation.DroppedCalls < 5*5990 {
		t.Fatalf("record of %d bytes, %d calls dropped", len(rec), res.Investigation.DroppedCalls)
	}
	for _, c := range allCalls(res.Investigation) {
		for k, v := range c.Params {
			if len(k) > 64 || len(v) > 1024 {
				t.Fatalf("param of %d/%d bytes stored", len(k), len(v))
			}
		}
		if len(c.Tool) > 64 || len(c.Host) > 255 || len(c.Reason) > 1024 {
			t.Fatalf("call %d/%d/%d bytes", len(c.Tool), len(c.Host), len(c.Reason))
		}
	}
	for i, req := range model.reqs {
		b, _ := json.Marshal(struct {
			S string
			M []report.Message
			T []report.Tool
			A json.RawMessage
		}{req.System, req.Messages, req.Tools, req.AnswerSchema})
		if len(b) > ctxBytes {
			t.Fatalf("request %d is %d bytes of JSON, context_bytes %d", i+1, len(b), ctxBytes)
		}
	}
}

// TestReuseFreshResult: a repeated alert's investigation cites the fresh
// result of the same diagnostic on the same host instead of running it
// again, with its age; past reuse_within it runs again.
func TestReuseFreshResult(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 3, 3, 10, 0, 0, 0, time.UTC))
	tasks := newFakeTasks(testTools, map[string]string{"journal": "Mar 3 10:00 app: disk full\n"})
	iv, _ := newTest(t, Config{ReuseWithin: 5 * time.Minute}, nil, tasks)
	iv.o.Clock = clk
	n := 0
	iv.o.NewID = func() string { n++; return fmt.Sprintf("inv-%d", n) }
	run := func(cite string) report.Result {
		iv.o.Provider = &scripted{turns: []report.Response{calls("journal -"), answerJSON(`{"root_cause":"disk","category":"disk_full",` +
			`"confidence":"confirmed","impact":"","gaps":[],"next_steps":[],"evidence":[{"task_id":"` + cite + `","quote":"app: disk full","claim":"full"}]}`)}}
		return iv.Run(context.Background(), parentEvidence())
	}
	first := run("inv-1-s1-c1")
	clk.Add(2 * time.Minute)
	second := run("inv-1-s1-c1")
	c := allCalls(second.Investigation)
	if len(tasks.specs) != 1 || len(c) != 1 || c[0].TaskID != "inv-1-s1-c1" || c[0].ReusedAgeS != 120 {
		t.Fatalf("%d tasks run; second call %+v", len(tasks.specs), c)
	}
	if first.Grounding.Verified != 1 || second.Grounding.Verified != 1 || second.Confidence != "confirmed" ||
		!strings.Contains(second.Markdown, "a reused result, 120s old") {
		t.Fatalf("second report:\n%s", second.Markdown)
	}
	clk.Add(4 * time.Minute)
	run("inv-3-s1-c1")
	if len(tasks.specs) != 2 {
		t.Fatalf("%d tasks run, want the diagnostic run again past reuse_within", len(tasks.specs))
	}
}
