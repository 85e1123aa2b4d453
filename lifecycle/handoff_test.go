package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

// fakeHandoff is an in-memory Handoff: per-instance logs of notices, a set
// of live instances, an injectable error, and a record of every call.
type fakeHandoff struct {
	mu      sync.Mutex
	live    map[string]bool
	err     error
	notices map[string][]HandedNotice
	seq     int
	wake    chan struct{}
	gives   []string // instance ids given to
	forgets []string
}

var _ Handoff = (*fakeHandoff)(nil)

func newFakeHandoff(live ...string) *fakeHandoff {
	h := &fakeHandoff{live: map[string]bool{}, notices: map[string][]HandedNotice{}, wake: make(chan struct{})}
	for _, id := range live {
		h.live[id] = true
	}
	return h
}

func (h *fakeHandoff) Give(_ context.Context, id, notice string, ttl time.Duration) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gives = append(h.gives, id)
	if h.err != nil || !h.live[id] {
		return false, h.err
	}
	if ttl <= 0 {
		return false, errors.New("ttl must be positive")
	}
	h.seq++
	h.notices[id] = append(h.notices[id], HandedNotice{ID: strconv.Itoa(h.seq), Body: notice})
	close(h.wake)
	h.wake = make(chan struct{})
	return true, nil
}

func (h *fakeHandoff) Take(ctx context.Context, id, after string, block time.Duration) ([]HandedNotice, error) {
	deadline := time.After(block)
	for {
		h.mu.Lock()
		if h.err != nil {
			h.mu.Unlock()
			return nil, h.err
		}
		var out []HandedNotice
		for _, n := range h.notices[id] {
			if a, _ := strconv.Atoi(after); after == "" || mustAtoi(n.ID) > a {
				out = append(out, n)
			}
		}
		wake := h.wake
		h.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		select {
		case <-wake:
		case <-deadline:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func mustAtoi(s string) int { n, _ := strconv.Atoi(s); return n }

func (h *fakeHandoff) Forget(_ context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.forgets = append(h.forgets, id)
	delete(h.notices, id)
	return nil
}

func (h *fakeHandoff) givenTo() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.gives...)
}

// TestHandoffOfAnotherInstancesNotice: a terminating notice of another
// instance whose agent is live is handed to it and deleted from the queue,
// never made visible again; without a live agent, or when the store fails,
// it is made visible again as before; a notice of another hook is never
// handed.
func TestHandoffOfAnotherInstancesNotice(t *testing.T) {
	tests := []struct {
		name       string
		live       bool
		err        error
		hook       string // the watcher's hook_name
		wantResult string // "" = no hand-off attempted
	}{
		{"live agent", true, nil, "drain", handoffHanded},
		{"any hook", true, nil, "", handoffHanded},
		{"no live agent", false, nil, "drain", handoffNoAgent},
		{"store fails", true, errors.New("redis down"), "drain", handoffError},
		{"another hook", true, nil, "other", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newFakeSQS()
				fake := asgfake.New(asgfake.Options{Seed: 4, Notify: func(body string) { q.send("note-i-2", body) }})
				fake.AddGroup("web")
				_ = fake.AddInstance("web", "i-1")
				_ = fake.AddInstance("web", "i-2")
				if err := fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: 90 * time.Second}); err != nil {
					t.Fatal(err)
				}
				if _, err := fake.Terminate("i-2"); err != nil {
					t.Fatal(err)
				}
				h := newFakeHandoff()
				if tt.live {
					h.live["i-2"] = true
				}
				h.err = tt.err
				cfg := DefaultConfig()
				cfg.Sources = []string{SourceSQS}
				cfg.QueueURL = *sqsReceive.QueueUrl
				cfg.HookName = tt.hook
				reg := prometheus.NewRegistry()
				w, err := NewWatcher(cfg, Deps{SQS: q, InstanceID: "i-1", Logger: testLogger(t), Registerer: reg, Handoff: h})
				if err != nil {
					t.Fatal(err)
				}
				// Long enough for a released notice to come back after a
				// foreign pause, far short of its heartbeat timeout.
				ctx, cancel := context.WithTimeout(t.Context(), 10*foreignPause)
				defer cancel()
				if err := w.Run(ctx, func(tr Trigger) { t.Errorf("fired %+v; want nothing (not our instance)", tr) }); err != nil {
					t.Fatal(err)
				}
				shown := len(q.callsFor("ChangeMessageVisibility", "note-i-2"))
				dels := len(q.callsFor("DeleteMessage", "note-i-2"))
				for _, r := range handoffResults {
					want := 0.0
					if r == tt.wantResult {
						want = 1
						if r != handoffHanded {
							want = -1 // once per receive: at least one
						}
					}
					got := counter(t, reg, "autodiag_lifecycle_handoffs_total", "result", r)
					if (want >= 0 && got != want) || (want < 0 && got < 1) {
						t.Errorf("handoffs{result=%s} = %v; want %v", r, got, want)
					}
				}
				switch tt.wantResult {
				case handoffHanded:
					if dels != 1 || shown != 0 || !q.msg("note-i-2").deleted {
						t.Fatalf("deleted %d times, shown again %d times; want deleted once, never shown", dels, shown)
					}
					if got := q.msg("note-i-2").receives; got != 1 {
						t.Fatalf("received %d times; want 1", got)
					}
				default:
					if dels != 0 || shown == 0 {
						t.Fatalf("deleted %d times, shown again %d times; want kept and shown again", dels, shown)
					}
					if tt.wantResult == "" && len(h.givenTo()) != 0 {
						t.Fatalf("handed to %v; want no hand-off of another hook's notice", h.givenTo())
					}
				}
			})
		})
	}
}

// TestHandedNoticeTriggersItsAgent: two agents share one queue and a
// hand-off; whichever receives i-2's notice, i-2's watcher fires with its
// action at once (no receipt: the message is gone), the message is
// received once and never made visible again, and completing the action
// forgets the handed notice.
func TestHandedNoticeTriggersItsAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newFakeSQS()
		fake := asgfake.New(asgfake.Options{Seed: 4, Notify: func(body string) { q.send("note-i-2", body) }})
		fake.AddGroup("web")
		_ = fake.AddInstance("web", "i-1")
		_ = fake.AddInstance("web", "i-2")
		if err := fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: 90 * time.Second}); err != nil {
			t.Fatal(err)
		}
		h := newFakeHandoff("i-1", "i-2")
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceSQS}
		cfg.QueueURL = *sqsReceive.QueueUrl
		cfg.HookName = "drain"
		cfg.HookHeartbeatTimeout = 90 * time.Second
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		fired := make(chan Trigger, 1)
		var wg sync.WaitGroup
		// Only i-1 polls the queue; i-2 learns of its notice through the
		// hand-off alone.
		w1, err := NewWatcher(cfg, Deps{SQS: q, InstanceID: "i-1", Logger: testLogger(t), Handoff: h})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = w1.Run(ctx, func(tr Trigger) { t.Errorf("i-1 fired %+v", tr) }) })
		synctest.Wait()
		w2, err := NewWatcher(cfg, Deps{SQS: &noReceive{q}, InstanceID: "i-2", Logger: testLogger(t), Handoff: h})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = w2.Run(ctx, func(tr Trigger) { fired <- tr }) })
		synctest.Wait()
		start := time.Now()
		acts, err := fake.Terminate("i-2")
		if err != nil || len(acts) != 1 {
			t.Fatalf("terminate: %v, %d actions", err, len(acts))
		}
		tok := acts[0].Token
		var tr Trigger
		select {
		case tr = <-fired:
		case <-time.After(sqsWaitTime): // fake time: a whole long poll of i-1's
			t.Fatal("i-2 never fired")
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("i-2 fired after %s of fake time; want at once", d)
		}
		if tr.Action == nil || tr.Action.InstanceID != "i-2" || tr.Action.Token != tok || tr.Action.NotificationReceipt != "" {
			t.Fatalf("trigger action %+v; want i-2's with token %s and no receipt", tr.Action, tok)
		}
		if got := h.givenTo(); len(got) != 1 || got[0] != "i-2" {
			t.Fatalf("given to %v; want [i-2] once", got)
		}
		if m := q.msg("note-i-2"); !m.deleted || m.receives != 1 {
			t.Fatalf("message deleted=%v after %d receives; want deleted after 1", m.deleted, m.receives)
		}
		if n := len(q.callsFor("ChangeMessageVisibility", "note-i-2")); n != 0 {
			t.Fatalf("shown again %d times; want never", n)
		}
		cancel()
		wg.Wait()

		actor := NewActor(cfg, Deps{AutoScaling: newASGClient(fake, nil), InstanceID: "i-2", Logger: testLogger(t), Handoff: h})
		if err := actor.Complete(t.Context(), *tr.Action, ResultContinue); err != nil {
			t.Fatal(err)
		}
		if len(h.forgets) != 1 || h.forgets[0] != "i-2" || len(h.notices["i-2"]) != 0 {
			t.Fatalf("forgotten %v, left %v; want i-2's notices dropped once", h.forgets, h.notices["i-2"])
		}
	})
}

// noReceive is a queue whose long poll never answers: the agent it serves
// learns of its notice only through the hand-off.
type noReceive struct{ *fakeSQS }

func (n *noReceive) ReceiveMessage(ctx context.Context, _ *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// barrierHandoff holds every Give until n of them are waiting at once (or
// their ctx ends): it tells a batch handed over concurrently from one
// handed over notice by notice.
type barrierHandoff struct {
	*fakeHandoff
	n       int
	mu      sync.Mutex
	waiting int
	all     chan struct{}
}

func (b *barrierHandoff) Give(ctx context.Context, id, notice string, ttl time.Duration) (bool, error) {
	b.mu.Lock()
	if b.waiting++; b.waiting == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return b.fakeHandoff.Give(ctx, id, notice, ttl)
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// TestHandoffOfABatchAtOnce: the other instances' notices of one receive are
// handed over at once, not one after the other: notice by notice, a batch
// under a slow Redis outlasts receiveVisibility and is received again by
// other agents. Each Give here returns only once all three are waiting;
// handed one after the other, each would wait out handoffTimeout and fail.
func TestHandoffOfABatchAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now().UTC().Format(time.RFC3339)
		q := newFakeSQS()
		others := []string{"i-2", "i-3", "i-4"}
		for _, id := range others {
			q.send("note-"+id, `{"Origin":"AutoScalingGroup","Destination":"EC2","Time":"`+now+`","LifecycleActionToken":"tok-`+id+
				`","AutoScalingGroupName":"web","LifecycleHookName":"drain","EC2InstanceId":"`+id+`","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`)
		}
		h := &barrierHandoff{fakeHandoff: newFakeHandoff(others...), n: len(others), all: make(chan struct{})}
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceSQS}
		cfg.QueueURL = *sqsReceive.QueueUrl
		cfg.HookName = "drain"
		w, err := NewWatcher(cfg, Deps{SQS: q, Handoff: h, InstanceID: "i-1", Logger: testLogger(t), Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		in := sqsReceive
		out, err := q.ReceiveMessage(t.Context(), &in)
		if err != nil || len(out.Messages) != len(others) {
			t.Fatalf("receive = %d messages, %v; want %d", len(out.Messages), err, len(others))
		}
		mine, released := w.sqs.handleBatch(t.Context(), out.Messages, time.Now().Add(receiveVisibility))
		if mine != nil || released {
			t.Fatalf("handleBatch = %+v, released %v; want no trigger, nothing shown again", mine, released)
		}
		for _, id := range others {
			if m := q.msg("note-" + id); !m.deleted {
				t.Errorf("%s's notice not deleted: not handed over (gives %v)", id, h.givenTo())
			}
		}
	})
}

// slowHandoff is a store that hangs every Give until its ctx ends while
// slow is set (a Redis that answers late), and records each Give's span.
type slowHandoff struct {
	*fakeHandoff
	mu    sync.Mutex
	slow  bool
	spans [][2]time.Time // start, end of each Give
	hides []time.Duration
}

func (s *slowHandoff) Give(ctx context.Context, id, notice string, ttl time.Duration) (bool, error) {
	start := time.Now()
	s.mu.Lock()
	slow := s.slow
	if d, ok := ctx.Deadline(); ok {
		s.hides = append(s.hides, d.Sub(start))
	}
	s.mu.Unlock()
	var handed bool
	var err error
	if slow {
		<-ctx.Done()
		err = ctx.Err()
	} else {
		handed, err = s.fakeHandoff.Give(ctx, id, notice, ttl)
	}
	s.mu.Lock()
	s.spans = append(s.spans, [2]time.Time{start, time.Now()})
	s.mu.Unlock()
	return handed, err
}

// TestHandoffEndsWithItsHide: while the store hangs, a Give lasts no longer
// than the receive's hide (receiveVisibility), so two agents sharing the
// queue never try to hand one notice at the same time, and a Give that
// lapsed leaves the message alone (no ChangeMessageVisibility on a receipt
// that another agent may hold by then). Once the store answers, the next
// agent that receives the notice hands it over and deletes it.
func TestHandoffEndsWithItsHide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newFakeSQS()
		now := time.Now().UTC().Format(time.RFC3339)
		q.send("note-i-2", `{"Origin":"AutoScalingGroup","Destination":"EC2","Time":"`+now+`","LifecycleActionToken":"tok-2",`+
			`"AutoScalingGroupName":"web","LifecycleHookName":"drain","EC2InstanceId":"i-2","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`)
		h := &slowHandoff{fakeHandoff: newFakeHandoff("i-2"), slow: true}
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceSQS}
		cfg.QueueURL = *sqsReceive.QueueUrl
		cfg.HookName = "drain"
		// The store hangs for handoffTimeout's worth of hides (a Give used to
		// wait that long), then answers.
		slowFor := 2 * handoffTimeout
		ctx, cancel := context.WithTimeout(t.Context(), slowFor+10*foreignPause)
		defer cancel()
		var wg sync.WaitGroup
		for _, id := range []string{"i-1", "i-3"} {
			w, err := NewWatcher(cfg, Deps{SQS: q, Handoff: h, InstanceID: id, Logger: testLogger(t), Registerer: prometheus.NewRegistry()})
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				if err := w.Run(ctx, func(tr Trigger) { t.Errorf("%s fired %+v; want nothing (not its instance)", id, tr) }); err != nil {
					t.Error(err)
				}
			})
		}
		time.Sleep(slowFor)
		h.mu.Lock()
		h.slow = false
		slowGives := len(h.spans)
		h.mu.Unlock()
		wg.Wait()

		h.mu.Lock()
		defer h.mu.Unlock()
		if slowGives < 2 {
			t.Fatalf("%d Gives while the store hung; want the notice passed round (at least 2)", slowGives)
		}
		for i, d := range h.hides {
			if d > receiveVisibility {
				t.Errorf("Give %d may wait %v; want at most the hide, %v", i, d, receiveVisibility)
			}
		}
		for i := range h.spans {
			for j := range i {
				a, b := h.spans[j], h.spans[i]
				if b[0].Before(a[1]) && a[0].Before(b[1]) {
					t.Errorf("Gives %d (%v–%v) and %d (%v–%v) of one notice at the same time",
						j, a[0].Sub(h.spans[0][0]), a[1].Sub(h.spans[0][0]), i, b[0].Sub(h.spans[0][0]), b[1].Sub(h.spans[0][0]))
				}
			}
		}
		if shown := len(q.callsFor("ChangeMessageVisibility", "note-i-2")); shown != 0 {
			t.Errorf("%d ChangeMessageVisibility calls after lapsed Gives; want none (the hide ends by itself)", shown)
		}
		if m := q.msg("note-i-2"); !m.deleted {
			t.Errorf("notice not deleted once the store answered (%d Gives, %d receives)", len(h.spans), m.receives)
		}
		if got := len(h.notices["i-2"]); got != 1 {
			t.Errorf("handed %d times; want once", got)
		}
	})
}

// failingTakes is a Handoff whose next fail reads fail.
type failingTakes struct {
	*fakeHandoff
	mu    sync.Mutex
	fail  int
	takes int
}

func (f *failingTakes) Take(ctx context.Context, id, after string, block time.Duration) ([]HandedNotice, error) {
	f.mu.Lock()
	f.takes++
	failing := f.fail > 0
	if failing {
		f.fail--
	}
	f.mu.Unlock()
	if failing {
		return nil, errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: i/o timeout")
	}
	return f.fakeHandoff.Take(ctx, id, after, block)
}

func (f *failingTakes) failNext(n int) {
	f.mu.Lock()
	f.fail = n
	f.mu.Unlock()
}

// levels records the level of each log line with message msg.
type levels struct {
	msg string
	mu  sync.Mutex
	got []slog.Level
}

func (l *levels) Enabled(context.Context, slog.Level) bool { return true }
func (l *levels) Handle(_ context.Context, r slog.Record) error {
	if r.Message == l.msg {
		l.mu.Lock()
		l.got = append(l.got, r.Level)
		l.mu.Unlock()
	}
	return nil
}
func (l *levels) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *levels) WithGroup(string) slog.Handler      { return l }

func (l *levels) take() []slog.Level {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.got
	l.got = nil
	return out
}

// TestHandoffReadFailsOnceQuietly: one failed read of the handed notices
// (as a read cut by a stop of the process fails on resume) is logged at
// INFO and retried; a second failure in a row warns, and a read that
// works starts the count again. Each failure is counted in the metric.
func TestHandoffReadFailsOnceQuietly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &failingTakes{fakeHandoff: newFakeHandoff("i-1")}
		log := &levels{msg: "read lifecycle notices handed to this instance; retrying (the queue's own poll goes on)"}
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceSQS}
		cfg.QueueURL = *sqsReceive.QueueUrl
		cfg.HookName = "drain"
		reg := prometheus.NewRegistry()
		w, err := NewWatcher(cfg, Deps{SQS: &noReceive{newFakeSQS()}, InstanceID: "i-1", Logger: slog.New(log), Handoff: h, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		wg.Go(func() { _ = w.Run(ctx, func(tr Trigger) { t.Errorf("fired %+v", tr) }) })
		synctest.Wait() // blocked in its first read

		// The retries' waits (newBackoff(time.Second, …)): the first at most
		// 1 s × (1 + the randomization), the second 1.5 times as long.
		first := time.Duration(float64(time.Second) * (1 + backoff.DefaultRandomizationFactor))
		second := time.Duration(float64(first) * backoff.DefaultMultiplier)

		// The read in progress ends empty at its block; the next one fails,
		// and the one after its wait blocks again.
		h.failNext(1)
		time.Sleep(handoffBlock + first)
		synctest.Wait()
		if got := log.take(); len(got) != 1 || got[0] != slog.LevelInfo {
			t.Fatalf("one failed read logged %v; want one INFO line", got)
		}

		// That read ends empty within handoffBlock; the two after it fail.
		h.failNext(2)
		time.Sleep(handoffBlock + first + second)
		synctest.Wait()
		if got := log.take(); len(got) != 2 || got[0] != slog.LevelInfo || got[1] != slog.LevelWarn {
			t.Fatalf("two failed reads in a row logged %v; want INFO, then WARN", got)
		}
		if n := testutil.ToFloat64(w.m.sourceErrors.WithLabelValues(sourceHandoff)); n != 3 {
			t.Errorf("%v handoff source errors counted; want 3", n)
		}
	})
}
