package worker

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/outcome"
)

// fakeHosts is a hand-written Hosts: owners by name, and what was given.
type fakeHosts struct {
	mu     sync.Mutex
	owners map[string]state.HostOwner
	amb    map[string][]string
	given  map[string][]string // instance → bodies
}

func (h *fakeHosts) HostOwner(_ context.Context, name string) (state.HostOwner, bool, error) {
	if ids, ok := h.amb[name]; ok {
		return state.HostOwner{}, false, &state.AmbiguousHostError{Name: name, IDs: ids}
	}
	o, ok := h.owners[name]
	return o, ok, nil
}

func (h *fakeHosts) GiveTask(_ context.Context, instanceID, body string, _ time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.given[instanceID] = append(h.given[instanceID], body)
	return nil
}

func (h *fakeHosts) TakeTasks(context.Context, string, string, int, time.Duration) ([]state.HandedNotice, error) {
	return nil, nil
}

func (h *fakeHosts) ForgetTasks(context.Context, string, ...string) error { return nil }

// placeSource records what the placement does to the message.
type placeSource struct {
	deferSource
	deleted int
}

func (s *placeSource) Delete(context.Context, *queue.Message) error { s.deleted++; return nil }

func (s *placeSource) DeadLetter(context.Context, *queue.Message, string) error {
	return queue.ErrNoDeadLetter
}

type noHooks struct{}

func (noHooks) Keep(*state.TaskRecord, *runner.Result, runner.Diagnostic) {}
func (noHooks) Writes(state.TaskRecord, runner.Diagnostic, *runner.Result) []state.Write {
	return nil
}

// TestPlace: a target task runs here only for one of the agent's names;
// for a running owner's host it is handed (message, handle and all) and
// let go unrun; for a draining, drained or warm-pool owner, or a name two
// live agents claim, it ends rejected with its reason, recorded and
// deleted; for a host nobody owns it is deferred by at most
// targetWaitRecheck until queue.target_wait after its creation, then ends
// rejected no_agent_for_host. A probe of {host} runs wherever it is.
func TestPlace(t *testing.T) {
	const wait = 2 * time.Minute
	catalog := map[string]runner.Diagnostic{
		"df":  {Name: "df", Command: []string{"/usr/bin/df"}},
		"dig": {Name: "dig", Command: []string{"/usr/bin/dig", "{host}"}},
	}
	created := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name       string
		diag, host string
		after      time.Duration // since the task's creation
		runsHere   bool
		handedTo   string
		deferred   time.Duration // -1 = not deferred
		rejected   string        // the record's reason; "" = none
		routing    string
	}{
		{"own name", "df", "me.example", 0, true, "", -1, "", RoutingHere},
		{"probe runs anywhere", "dig", "web-9", 0, true, "", -1, "", ""},
		{"running owner", "df", "web-1", 0, false, "i-web1", -1, "", RoutingHanded},
		{"draining owner", "df", "web-2", 0, false, "", -1, ReasonDraining, ReasonDraining},
		{"drained owner", "df", "web-3", 0, false, "", -1, ReasonDraining, ReasonDraining},
		{"warm pool owner", "df", "web-4", 0, false, "", -1, ReasonStandby, ReasonStandby},
		{"ambiguous name", "df", "web-5", 0, false, "", -1, ReasonAmbiguous, ReasonAmbiguous},
		{"no owner, just sent", "df", "ghost", 0, false, "", targetWaitRecheck, "", RoutingWaiting},
		{"no owner, 1ms left", "df", "ghost", wait - time.Millisecond, false, "", time.Millisecond, "", RoutingWaiting},
		{"no owner at target_wait", "df", "ghost", wait, false, "", -1, ReasonNoAgent, ReasonNoAgent},
		{"no owner, a tool call does not wait", "df", "ghost-tool", 0, false, "", -1, ReasonNoAgent, ReasonNoAgent},
		{"own name another live agent claims too", "df", "shared.example", 0, false, "", -1, ReasonAmbiguous, ReasonAmbiguous},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewManual(created.Add(tt.after))
			src := &placeSource{}
			store := state.NewMemory(state.MemoryOptions{Clock: clk})
			hosts := &fakeHosts{given: map[string][]string{}, owners: map[string]state.HostOwner{
				"web-1": {ID: "i-web1", State: "running"}, "web-2": {ID: "i-web2", State: "draining"},
				"web-3": {ID: "i-web3", State: "drained"}, "web-4": {ID: "i-web4", State: "warmed"},
			}, amb: map[string][]string{"web-5": {"i-a", "i-b"}}}
			routing := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "routing"}, []string{"result"})
			w, _ := testWorker(t, Options{Source: src, Store: store, Clock: clk, Lease: 30 * time.Second, InstanceID: "i-me",
				Catalog: catalog, Hooks: noHooks{}, Placement: Placement{Names: []string{"me.example", "i-me", "shared.example"}, Hosts: hosts, TargetWait: wait, Routing: routing,
					Ambiguous: func(name string) []string {
						if name == "shared.example" {
							return []string{"i-me", "i-other"}
						}
						return nil
					}}})
			w.outcomes.received(true)
			msg := &queue.Message{ID: "m1", Handle: "rh-1", ReceiveCount: 1, Body: []byte(`{"id":"t1"}`)}
			j := &job{msg: msg, received: clk.Now(), task: task.Task{ID: "t1", Host: tt.host, Diagnostic: tt.diag, CreatedAt: created}}
			if tt.host == "ghost-tool" {
				j.task.Origin = task.OriginInvestigation
			}
			if here := !w.pipeline.place(j); here != tt.runsHere {
				t.Fatalf("runs here = %v, want %v", here, tt.runsHere)
			}
			for inst, bodies := range hosts.given {
				var h handed
				if inst != tt.handedTo || len(bodies) != 1 || json.Unmarshal([]byte(bodies[0]), &h) != nil || h.Handle != "rh-1" || h.From != "i-me" || h.Body != string(msg.Body) {
					t.Errorf("given to %s: %v; want the message, its handle and its sender given once to %q", inst, bodies, tt.handedTo)
				}
			}
			if tt.handedTo != "" && len(hosts.given[tt.handedTo]) != 1 {
				t.Errorf("nothing handed to %s", tt.handedTo)
			}
			switch {
			case tt.deferred >= 0 && (len(src.delays) != 1 || src.delays[0] != tt.deferred):
				t.Errorf("deferrals %v, want one of %s", src.delays, tt.deferred)
			case tt.deferred < 0 && len(src.delays) != 0:
				t.Errorf("deferrals %v, want none", src.delays)
			}
			rec, ok, _ := store.Task(t.Context(), "t1")
			switch {
			case tt.rejected == "" && ok:
				t.Errorf("a record %+v was written; want none", rec)
			case tt.rejected != "" && (!ok || rec.Outcome != outcome.Rejected || rec.Reason != tt.rejected || rec.Owner != "i-me" || src.deleted != 1):
				t.Errorf("record %+v (found %v), deletes %d; want rejected %s by i-me, the message deleted", rec, ok, src.deleted, tt.rejected)
			}
			if tt.routing != "" {
				if n := testutil.ToFloat64(routing.WithLabelValues(tt.routing)); n != 1 {
					t.Errorf("routing{%s} = %v, want 1", tt.routing, n)
				}
			}
		})
	}
}

// blockingHosts is a Hosts whose TakeTasks waits, as XREAD BLOCK does
// with nothing handed, and says how many tasks it was asked for.
type blockingHosts struct {
	fakeHosts
	asked chan int
}

func (h *blockingHosts) TakeTasks(ctx context.Context, _, _ string, count int, _ time.Duration) ([]state.HandedNotice, error) {
	h.asked <- count
	<-ctx.Done()
	return nil, nil
}

// TestTakeHandedHoldsOneSlot: while no task is handed, the read waiting
// for one holds one slot of the receive window and leaves the others to
// the queue's receives.
func TestTakeHandedHoldsOneSlot(t *testing.T) {
	hosts := &blockingHosts{asked: make(chan int, 1)}
	w, _ := testWorker(t, Options{Source: &placeSource{}, Store: state.NewMemory(state.MemoryOptions{}), Clock: clock.Wall{},
		Lease: 30 * time.Second, InstanceID: "i-me", Hooks: noHooks{}, Placement: Placement{Names: []string{"me"}, Hosts: hosts}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.TakeHanded(ctx) }()
	if n := <-hosts.asked; n != 1 {
		t.Errorf("the waiting read asked for %d tasks, want 1", n)
	}
	if !w.pipeline.receive.TryAcquire(1) {
		t.Error("the waiting read holds every slot of the receive window; the queue's receives get none")
	} else {
		w.pipeline.receive.Release(1)
	}
	cancel()
	<-done
}

// TestHandedCountedOnceAndTimed: a task handed by the agent that received
// it carries that receipt's time; here it is not counted as received again
// (the sender counted it), yet waits for its outcome like any job, and its
// start observes the hand-off delay from the sender's receipt. A task from
// the queue is counted and observes none.
func TestHandedCountedOnceAndTimed(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_800_000_000, 0))
	w, m := testWorker(t, Options{Source: &placeSource{}, Store: state.NewMemory(state.MemoryOptions{Clock: clk}), Clock: clk})
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})
	w.outcomes.m.Handoff = hist

	msg := &queue.Message{ID: "m1", Handle: "rh-1", Body: []byte(`{"id":"t1"}`)}
	body, err := json.Marshal(handedOf(msg, "i-from", clk.Now()))
	if err != nil {
		t.Fatal(err)
	}
	var h handed
	if err := json.Unmarshal(body, &h); err != nil || !h.ReceivedAt.Equal(clk.Now()) {
		t.Fatalf("handed %s: received_at %v (err %v), want the sender's receipt %v", body, h.ReceivedAt, err, clk.Now())
	}

	w.outcomes.received(false)
	if got := testutil.ToFloat64(m.Received); got != 0 {
		t.Errorf("a handed task counted as received here %v times, want 0 (its sender counted it)", got)
	}
	if got := testutil.ToFloat64(m.Inflight); got != 1 {
		t.Errorf("in flight %v, want 1: the handed task waits for its outcome here", got)
	}
	const delay = 350 * time.Millisecond
	clk.Add(delay)
	j := &job{msg: h.message(), handedAt: h.ReceivedAt, task: task.Task{ID: "t1"}}
	w.outcomes.handedStart(j)
	if n := testutil.CollectAndCount(hist); n != 1 || j.handoff != delay {
		t.Errorf("hand-off observed %d series, delay %s; want one observation of %s", n, j.handoff, delay)
	}
	if s := histSum(t, hist); s != delay.Seconds() {
		t.Errorf("hand-off sum %v s, want %v s", s, delay.Seconds())
	}

	w.outcomes.received(true)
	w.outcomes.handedStart(&job{task: task.Task{ID: "t2"}})
	if got := testutil.ToFloat64(m.Received); got != 1 {
		t.Errorf("a task from the queue counted %v times, want 1", got)
	}
	if s := histSum(t, hist); s != delay.Seconds() {
		t.Errorf("a task from the queue observed a hand-off (sum %v s)", s)
	}
}

func histSum(t *testing.T, h prometheus.Histogram) float64 {
	t.Helper()
	var out dto.Metric
	if err := h.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetHistogram().GetSampleSum()
}

// emptyThenBlockHosts is a Hosts whose TakeTasks finds nothing, at once,
// empties times (a block that ran out), then waits as blockingHosts does.
type emptyThenBlockHosts struct {
	fakeHosts
	empties int
	calls   int
	waiting chan struct{}
}

func (h *emptyThenBlockHosts) TakeTasks(ctx context.Context, _, _ string, _ int, _ time.Duration) ([]state.HandedNotice, error) {
	h.calls++
	if h.calls <= h.empties {
		return nil, nil
	}
	close(h.waiting)
	<-ctx.Done()
	return nil, nil
}

// TestTakeHandedKeepsItsSlot: the read waiting for hand-offs keeps its one
// slot of the receive window from one empty read to the next. Given back
// between them, the queue's receive would take it for its long poll and a
// task handed meanwhile would wait for that poll (the 200-agent fleetsim
// measured a hand-off delay p50 of 10 s so); once the reads end, it goes
// back.
func TestTakeHandedKeepsItsSlot(t *testing.T) {
	hosts := &emptyThenBlockHosts{empties: 3, waiting: make(chan struct{})}
	w, _ := testWorker(t, Options{Source: &placeSource{}, Store: state.NewMemory(state.MemoryOptions{}), Clock: clock.Wall{},
		Lease: 30 * time.Second, InstanceID: "i-me", Hooks: noHooks{}, Placement: Placement{Names: []string{"me"}, Hosts: hosts}})
	win := w.pipeline.receive
	// Every slot given back closes the window's changed channel.
	win.mu.Lock()
	changed := win.changed
	win.mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); w.TakeHanded(ctx) }()
	<-hosts.waiting
	win.mu.Lock()
	held := win.held
	win.mu.Unlock()
	select {
	case <-changed:
		t.Errorf("a slot was given back between %d empty reads; want the waiting read's one kept", hosts.empties)
	default:
	}
	if held != 1 {
		t.Errorf("%d slots held while waiting for a hand-off, want 1", held)
	}
	cancel()
	<-done
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.held != 0 {
		t.Errorf("%d slots still held after the reads ended, want 0", win.held)
	}
}
