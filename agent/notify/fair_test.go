package notify

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fairEvents is how many events the fairness test writes: many more than
// the workers, so that a dispatcher that lets the hanging sink take every
// worker would deliver almost none of the healthy sink's.
const fairEvents = 50

// A webhook that never answers beside a healthy one, four workers: the
// healthy sink receives every event while the hanging one holds its own
// lane only, in both outboxes.
func TestDispatcherHangingSinkDoesNotStarveOthers(t *testing.T) {
	for name, open := range outboxesCapped(t, 10*fairEvents) {
		t.Run(name, func(t *testing.T) {
			o := open(t)
			hung := newReceiver(t, 200)
			hung.hang = make(chan struct{})
			t.Cleanup(func() { close(hung.hang) })
			ok := newReceiver(t, 200)
			sinks, err := NewSinks([]SinkConfig{
				{Name: "slow", Type: TypeWebhook, URL: hung.URL, AllowHTTP: true, On: EventTypes, Timeout: testIdle / 3},
				{Name: "fast", Type: TypeWebhook, URL: ok.URL, AllowHTTP: true, On: EventTypes, Timeout: testIdle / 3},
			}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewPedanticRegistry()
			d, err := NewDispatcher(o.Outbox, sinks, Options{InstanceID: "i-a", Workers: 4, Clock: o.clock,
				PollInterval: time.Millisecond, Registerer: reg, Logger: slog.New(slog.DiscardHandler),
				BackoffBase: time.Hour, BackoffMax: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			runDispatcher(t, d)
			for range fairEvents {
				if _, err := d.Enqueue(context.Background(), failedEvent()); err != nil {
					t.Fatal(err)
				}
			}
			// Each healthy delivery is a loopback round trip; the hanging
			// sink's timeouts (testIdle/3 each) must not stand in front of
			// them: well within the time of the hanging sink's first
			// timeout for every lane slot it has.
			// The receiver sees a request before the dispatcher has read
			// its answer and counted it: wait for both.
			waitFor(t, 5*time.Second, "the healthy sink received and the dispatcher counted every event", func() bool {
				return len(ok.requests()) == fairEvents &&
					testutil.ToFloat64(d.m.total.WithLabelValues("fast", "failed", ResultDelivered)) == fairEvents
			})
			// At once, not in all: each hung request ends at the sink's
			// timeout (testIdle/3) and the lane then takes the next event,
			// so a slow run (CI under load) sends it more than two.
			if n := hung.mostAtOnce(); n > 2 {
				t.Errorf("the hanging sink had %d requests at once, want at most its lane of 2 of 4 workers", n)
			}
			if len(hung.requests()) == 0 {
				t.Error("the hanging sink received no request")
			}
			if got := testutil.ToFloat64(d.m.total.WithLabelValues("fast", "failed", ResultDelivered)); got != fairEvents {
				t.Errorf("delivered{sink=fast} = %v, want %d", got, fairEvents)
			}
		})
	}
}

// lockedBuffer is a log destination a test reads while the dispatcher
// writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Past the cap, the oldest entries are dead-lettered with outbox_full,
// counted and logged: every entry written is delivered or in the dead list.
func TestDispatcherShedsPastTheCap(t *testing.T) {
	for name, open := range outboxes(t) {
		t.Run(name, func(t *testing.T) {
			o := open(t)
			ok := newReceiver(t, 200)
			sinks, err := NewSinks([]SinkConfig{{Name: "a", Type: TypeWebhook, URL: ok.URL, AllowHTTP: true, On: EventTypes,
				Timeout: testIdle / 3}}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var logs lockedBuffer
			reg := prometheus.NewPedanticRegistry()
			d, err := NewDispatcher(o.Outbox, sinks, Options{InstanceID: "i-a", Clock: o.clock,
				PollInterval: time.Millisecond, Registerer: reg, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			// Written before the dispatcher runs: the cap is passed at once.
			var ids []string
			for range testMaxLen + 3 {
				id, err := d.Enqueue(context.Background(), failedEvent())
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			runDispatcher(t, d)
			waitFor(t, 5*time.Second, "every entry delivered or dead", func() bool {
				dead, _ := o.ListDead(context.Background(), 100)
				return len(ok.requests())+len(dead) == len(ids)
			})
			dead, _ := o.ListDead(context.Background(), 100)
			seen := map[string]string{}
			for _, r := range ok.requests() {
				seen[r.header.Get(HeaderDelivery)] = "delivered"
			}
			for _, e := range dead {
				if e.Reason != ReasonOutboxFull {
					t.Errorf("dead entry %s: reason %q, want %s", e.ID, e.Reason, ReasonOutboxFull)
				}
				seen[e.ID] = "dead"
			}
			for i, id := range ids {
				want := "delivered"
				if i < 3 {
					want = "dead" // the oldest go first
				}
				if seen[id] != want {
					t.Errorf("entry %d (%s): %q, want %s", i, id, seen[id], want)
				}
			}
			if got := testutil.ToFloat64(d.m.dropped.WithLabelValues("a", ReasonOutboxFull)); got != 3 {
				t.Errorf("dropped{outbox_full} = %v, want 3", got)
			}
			if got := testutil.ToFloat64(d.m.total.WithLabelValues("a", "failed", ResultDead)); got != 3 {
				t.Errorf("notifications{result=dead} = %v, want 3", got)
			}
			if l := logs.String(); !strings.Contains(l, `"reason":"outbox_full"`) || !strings.Contains(l, ids[0]) {
				t.Errorf("no error line naming the dropped entries: %s", l)
			}
		})
	}
}
