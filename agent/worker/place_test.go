package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/drain"
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

// streamHosts is a Hosts whose TakeTasks reads entries handed to it
// (hand) as XREAD BLOCK does: what is there after the cursor, up to count,
// else it waits for a hand-off or ctx.
type streamHosts struct {
	fakeHosts
	mu      sync.Mutex
	entries []state.HandedNotice
	more    chan struct{} // closed and replaced by hand
}

func (h *streamHosts) hand(bodies ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, b := range bodies {
		h.entries = append(h.entries, state.HandedNotice{ID: fmt.Sprintf("%d-0", len(h.entries)+1), Body: b})
	}
	close(h.more)
	h.more = make(chan struct{})
}

func (h *streamHosts) TakeTasks(ctx context.Context, _, after string, count int, _ time.Duration) ([]state.HandedNotice, error) {
	for {
		h.mu.Lock()
		var out []state.HandedNotice
		for _, e := range h.entries {
			if len(out) < count && (after == "" || e.ID > after) {
				out = append(out, e)
			}
		}
		more := h.more
		h.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-more:
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// holdSource records the messages held, as the queue's Hold keeps them
// hidden.
type holdSource struct {
	placeSource
	hmu  sync.Mutex
	held []*queue.Message
}

func (s *holdSource) Hold(m *queue.Message) func() {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.held = append(s.held, m)
	return func() {}
}

func (s *holdSource) heldNow() []*queue.Message {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	return slices.Clone(s.held)
}

type acceptAll struct{}

func (acceptAll) Validate(*task.Task, time.Time) error { return nil }

// TestTakeHandedWhileTheWindowIsFull: tasks handed to this agent are taken
// the moment they are handed, though the queue's receives hold every slot
// of the receive window and the only worker is busy: they wait here for
// the worker, their messages held (kept hidden, counted from the sender's
// receive), rather than in the stream, unextended, until a receive gives
// a slot back. The window's slots stay the queue's.
func TestTakeHandedWhileTheWindowIsFull(t *testing.T) {
	const handedTasks = 3
	synctest.Test(t, func(t *testing.T) {
		clk := clock.Wall{}
		src := &holdSource{}
		hosts := &streamHosts{more: make(chan struct{})}
		catalog := map[string]runner.Diagnostic{"df": {Name: "df", Command: []string{"/usr/bin/df"}}}
		w, _ := testWorker(t, Options{Source: src, Store: state.NewMemory(state.MemoryOptions{}), Clock: clk, Lease: 30 * time.Second,
			InstanceID: "i-me", Hooks: noHooks{}, Catalog: catalog, Validator: acceptAll{}, Drain: drain.New(drain.Config{}),
			Placement: Placement{Names: []string{"me"}, Hosts: hosts}})
		p := w.pipeline
		hard, fastExit := context.WithCancel(t.Context())
		p.hard = hard
		limit, _ := p.receive.size()
		if err := p.receive.Acquire(t.Context(), limit); err != nil { // the queue's receives
			t.Fatal(err)
		}
		if err := p.run.Acquire(t.Context(), 1); err != nil { // a running task
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); w.TakeHanded(ctx) }()

		sentAt := time.Now().Add(-time.Second)
		var bodies []string
		for i := range handedTasks {
			msg := &queue.Message{ID: fmt.Sprintf("m%d", i), Handle: fmt.Sprintf("rh-%d", i),
				Body: []byte(fmt.Sprintf(`{"id":"t%d","host":"me","diagnostic":"df"}`, i))}
			b, err := json.Marshal(handedOf(msg, "i-from", sentAt))
			if err != nil {
				t.Fatal(err)
			}
			bodies = append(bodies, string(b))
		}
		hosts.hand(bodies...)
		synctest.Wait()

		if n := p.waiting.Load(); n != handedTasks {
			t.Errorf("%d handed tasks taken and waiting for the worker, want all %d", n, handedTasks)
		}
		held := src.heldNow()
		if len(held) != handedTasks {
			t.Errorf("%d handed messages held, want %d", len(held), handedTasks)
		}
		for _, m := range held {
			if !m.ReceivedAt.Equal(sentAt) {
				t.Errorf("message %s held counting from %v, want the sender's receive %v", m.ID, m.ReceivedAt, sentAt)
			}
		}
		if _, inWindow := p.receive.size(); inWindow != limit {
			t.Errorf("%d slots of the receive window held, want the queue's %d alone", inWindow, limit)
		}

		stop()
		<-done
		fastExit() // the waiting tasks go back to the queue
		w.Wait()
		if n := len(src.delays); n != handedTasks {
			t.Errorf("%d handed back on the fast exit, want %d", n, handedTasks)
		}
		if !p.handed.TryAcquire(handedHeldMax) {
			t.Error("slots of the handed tasks still held after they ended")
		}
	})
}
