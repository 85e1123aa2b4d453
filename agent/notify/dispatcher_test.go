package notify

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/internal/clock"
)

// harness is a dispatcher with one webhook sink on a receiver.
type harness struct {
	d     *Dispatcher
	ob    Outbox
	rcv   *receiver
	clock *clock.Manual
	reg   *prometheus.Registry
}

func newHarness(t *testing.T, ob Outbox, clock *clock.Manual, instance string, o Options, answers ...int) *harness {
	t.Helper()
	rcv := newReceiver(t, answers...)
	sinks, err := NewSinks([]SinkConfig{{Name: "hook", Type: TypeWebhook, URL: rcv.URL, AllowHTTP: true,
		SecretEnv: "KEY", On: EventTypes, Timeout: testIdle / 3}},
		func(string) (string, bool) { return "k3y", true }, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	o.InstanceID, o.Clock, o.Registerer = instance, clock, reg
	if o.PollInterval == 0 {
		o.PollInterval = time.Millisecond
	}
	o.Rand = func() float64 { return 0.5 }
	o.Logger = slog.New(slog.DiscardHandler)
	d, err := NewDispatcher(ob, sinks, o)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{d: d, ob: ob, rcv: rcv, clock: clock, reg: reg}
}

func (h *harness) count(result string) float64 {
	return testutil.ToFloat64(h.d.m.total.WithLabelValues("hook", "failed", result))
}

func failedEvent() Event {
	ev := testEvent()
	ev.ID = ""
	return ev
}

func TestDispatcherDelivers(t *testing.T) {
	clock := newFakeClock()
	h := newHarness(t, NewMemoryOutbox(MemoryOptions{ClaimIdle: testIdle, Clock: clock}), clock, "i-a", Options{})
	runDispatcher(t, h.d)
	id, err := h.d.Enqueue(context.Background(), failedEvent())
	if err != nil || id == "" {
		t.Fatalf("Enqueue: %q %v", id, err)
	}
	waitFor(t, 5*time.Second, "delivered", func() bool { return h.count(ResultDelivered) == 1 })
	r := h.rcv.requests()
	if len(r) != 1 || r[0].header.Get(HeaderDelivery) != id || !Verify([]byte("k3y"), r[0].body, r[0].header.Get(HeaderSignature)) {
		t.Fatalf("requests: %+v", r)
	}
	waitFor(t, 5*time.Second, "outbox empty", func() bool { n, _ := h.ob.Pending(context.Background(), "hook"); return n == 0 })
	if n := testutil.CollectAndCount(h.reg, "autodiag_notification_delay_seconds"); n != 1 {
		t.Errorf("delay histogram: %d series", n)
	}
	if problems, err := testutil.GatherAndLint(h.reg); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
	// An event no sink wants is not written.
	d2 := h.d
	if id, err := d2.Enqueue(context.Background(), Event{Type: "nobody"}); id != "" || err != nil {
		t.Errorf("unwanted event: %q %v", id, err)
	}
}

// The receiver fails three times, then takes it: one delivery, the same
// id and body on every try, a backoff between tries.
func TestDispatcherRetriesWithTheSameID(t *testing.T) {
	clock := newFakeClock()
	ob := NewMemoryOutbox(MemoryOptions{ClaimIdle: testIdle, Clock: clock})
	h := newHarness(t, ob, clock, "i-a", Options{BackoffBase: time.Second, BackoffMax: time.Minute}, 500, 500, 500, 200)
	runDispatcher(t, h.d)
	id, err := h.d.Enqueue(context.Background(), failedEvent())
	if err != nil {
		t.Fatal(err)
	}
	for try := 1; try <= 3; try++ {
		waitFor(t, 5*time.Second, "a failed try", func() bool { return rescheduled(ob, try) })
		if n := h.count(ResultRetry); n != float64(try) {
			t.Fatalf("%v retries counted, want %d", n, try)
		}
		if n := len(h.rcv.requests()); n != try {
			t.Fatalf("%d requests before the backoff passed, want %d", n, try)
		}
		// Backoff base·2^(try-1), drawn from its upper half (Rand 0.5).
		h.clock.Add(time.Second << (try - 1))
	}
	waitFor(t, 5*time.Second, "delivered", func() bool { return h.count(ResultDelivered) == 1 })
	r := h.rcv.requests()
	if len(r) != 4 {
		t.Fatalf("%d requests, want 4", len(r))
	}
	for _, req := range r {
		if req.header.Get(HeaderDelivery) != id || string(req.body) != string(r[0].body) {
			t.Fatalf("a retry changed the delivery: %s %s", req.header.Get(HeaderDelivery), req.body)
		}
	}
}

func TestDispatcherGivesUp(t *testing.T) {
	tests := []struct {
		name     string
		answers  []int
		requests int
		reason   string
	}{
		{"a 400 is dead at once", []int{400}, 1, "status_400"},
		{"after max attempts", []int{503}, 3, "max_attempts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			ob := NewMemoryOutbox(MemoryOptions{ClaimIdle: testIdle, Clock: clock})
			h := newHarness(t, ob, clock, "i-a", Options{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Second}, tt.answers...)
			runDispatcher(t, h.d)
			if _, err := h.d.Enqueue(context.Background(), failedEvent()); err != nil {
				t.Fatal(err)
			}
			// The clock moves only once the dispatcher is done with a try:
			// the entry is dead or back in the outbox, waiting for its retry.
			for try := 1; h.count(ResultDead) == 0; try++ {
				waitFor(t, 5*time.Second, "a try ends", func() bool { return rescheduled(ob, try) || h.count(ResultDead) > 0 })
				h.clock.Add(time.Second)
			}
			if n := len(h.rcv.requests()); n != tt.requests {
				t.Errorf("%d requests, want %d", n, tt.requests)
			}
			dead, _ := ob.ListDead(context.Background(), 10)
			if len(dead) != 1 || dead[0].Reason != tt.reason || dead[0].Attempts != tt.requests {
				t.Fatalf("dead = %+v", dead)
			}
		})
	}
}

func TestDispatcherGivesUpPastMaxAge(t *testing.T) {
	clock := newFakeClock()
	ob := NewMemoryOutbox(MemoryOptions{ClaimIdle: testIdle, Clock: clock})
	h := newHarness(t, ob, clock, "i-a", Options{MaxAge: time.Hour, BackoffBase: 40 * time.Minute, BackoffMax: 40 * time.Minute}, 500)
	runDispatcher(t, h.d)
	if _, err := h.d.Enqueue(context.Background(), failedEvent()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "first try", func() bool { return rescheduled(ob, 1) })
	h.clock.Add(40 * time.Minute)
	// The second try fails too, and its backoff would end past max age.
	waitFor(t, 5*time.Second, "dead", func() bool { return h.count(ResultDead) == 1 })
	if dead, _ := ob.ListDead(context.Background(), 1); len(dead) != 1 || dead[0].Reason != "max_age" {
		t.Fatalf("dead = %+v", dead)
	}
}

// newHangingDispatcher is a dispatcher on a memory outbox (nothing is
// reclaimed within a test) whose one sink, of type typ and with the longest
// timeout, posts to a receiver that answers only when the test ends.
func newHangingDispatcher(t *testing.T, typ string) (*Dispatcher, *MemoryOutbox, *receiver) {
	t.Helper()
	clock := newFakeClock()
	ob := NewMemoryOutbox(MemoryOptions{ClaimIdle: time.Hour, Clock: clock})
	rcv := newReceiver(t, 200)
	rcv.hang = make(chan struct{})
	t.Cleanup(func() { close(rcv.hang) })
	sinks, err := NewSinks([]SinkConfig{{Name: typ, Type: typ, URL: rcv.URL, AllowHTTP: true,
		On: EventTypes, Timeout: MaxTimeout}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDispatcher(ob, sinks, Options{InstanceID: "i-a", Clock: clock, PollInterval: time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return d, ob, rcv
}

// A receiver that never answers cannot hold Stop past its deadline; the
// entry stays in the outbox for another agent.
func TestDispatcherStopRespectsDeadline(t *testing.T) {
	d, ob, rcv := newHangingDispatcher(t, TypeSlack)
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	if _, err := d.Enqueue(context.Background(), failedEvent()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the request arrives", func() bool { return len(rcv.requests()) == 1 })

	const bound = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	err := d.Stop(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline", err)
	}
	// The bound plus room for a loaded 2-core runner with -race, far below
	// the sink's timeout, which a Stop waiting on the sink would take.
	if took > bound+MaxTimeout/4 {
		t.Fatalf("Stop took %s with a %s bound", took, bound)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after Stop cut its deliveries short")
	}
	if n, _ := ob.Pending(context.Background(), TypeSlack); n != 1 {
		t.Fatalf("Pending = %d: the cut delivery must stay for another agent", n)
	}
}

// A draining agent claims nothing from the outbox but still sends the
// events it writes itself.
func TestDispatcherDrainSendsOwnEventsOnly(t *testing.T) {
	clock := newFakeClock()
	ob := NewMemoryOutbox(MemoryOptions{ClaimIdle: testIdle, Clock: clock})
	h := newHarness(t, ob, clock, "i-a", Options{})
	// Another agent's event waits in the outbox.
	other, _ := h.d.Entries(failedEvent())
	if _, err := ob.Enqueue(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	h.d.Drain()
	runDispatcher(t, h.d)
	id, err := h.d.Enqueue(context.Background(), Event{Type: EventDrainStarted, Drain: &Drain{Source: "sqs"}})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "drain_started delivered", func() bool {
		return testutil.ToFloat64(h.d.m.total.WithLabelValues("hook", "drain_started", ResultDelivered)) == 1
	})
	r := h.rcv.requests()
	if len(r) != 1 || r[0].header.Get(HeaderDelivery) != id {
		t.Fatalf("requests: %d (the other agent's event must wait)", len(r))
	}
	if n, _ := ob.Pending(context.Background(), "hook"); n != 1 {
		t.Fatalf("Pending = %d, want the other agent's event left", n)
	}
	waitFor(t, 5*time.Second, "autodiag_outbox_pending shows it", func() bool { return testutil.ToFloat64(h.d.m.pending) == 1 })
}

func TestNewDispatcherChecksTimeoutAgainstClaimIdle(t *testing.T) {
	sinks, err := NewSinks([]SinkConfig{{Name: "s", Type: TypeWebhook, URL: "https://h/", On: EventTypes, Timeout: time.Minute}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewDispatcher(NewMemoryOutbox(MemoryOptions{ClaimIdle: time.Minute + time.Second}), sinks, Options{InstanceID: "i"})
	if err == nil {
		t.Fatal("a sink timeout as long as the claim idle time was accepted")
	}
	if _, err := NewDispatcher(NewMemoryOutbox(MemoryOptions{}), sinks, Options{InstanceID: "i"}); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

func TestBackoff(t *testing.T) {
	dv := &deliverer{o: Options{BackoffBase: time.Second, BackoffMax: 10 * time.Second}}
	for _, tt := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 0, 500 * time.Millisecond}, {1, 0.999999, time.Second - time.Microsecond},
		{3, 0.5, 3 * time.Second}, {10, 0, 5 * time.Second}, {60, 0.5, 7500 * time.Millisecond},
	} {
		dv.o.Rand = func() float64 { return tt.r }
		if got := dv.backoff(tt.attempt); got.Round(time.Millisecond) != tt.want.Round(time.Millisecond) {
			t.Errorf("backoff(%d) with %v = %s, want %s", tt.attempt, tt.r, got, tt.want)
		}
	}
}

// A Stop that comes before Run (a drain that ends as the agent starts)
// leaves Run nothing to deliver: a delivery started then would be bounded
// by its sink's timeout only, not by the Stop that already returned.
func TestDispatcherRunAfterStopReturns(t *testing.T) {
	d, ob, _ := newHangingDispatcher(t, TypeWebhook)
	d.Drain()
	if _, err := d.Enqueue(context.Background(), Event{Type: EventDrainCompleted, Drain: &Drain{Source: "signal"}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if err := d.Stop(ctx); err != nil {
		t.Fatalf("Stop before Run = %v, want nil", err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run after Stop is still delivering; nothing bounds it")
	}
	if n, _ := ob.Pending(context.Background(), TypeWebhook); n != 1 {
		t.Errorf("Pending = %d: the event must stay for another agent", n)
	}
}
