package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

// runWatcher runs w until it returns (bounded by an hour of fake time) and
// returns the triggers fired with the number of ReceiveMessage calls seen
// when the trigger fired.
func runWatcher(t *testing.T, ctx context.Context, w *Watcher, q *fakeSQS) (fired []Trigger, receivesAtFire int) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func(tr Trigger) {
			fired = append(fired, tr)
			if q != nil {
				receivesAtFire = len(q.callsFor("ReceiveMessage", ""))
			}
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v; want nil", err)
		}
	case <-time.After(time.Hour):
		t.Fatal("Run did not return within an hour of fake time")
	}
	return fired, receivesAtFire
}

func TestSQSSource(t *testing.T) {
	tests := []struct {
		name string
		wrap func(string) string
	}{
		{"direct", func(b string) string { return b }},
		{"SNS wrapped", snsWrap},
		{"EventBridge", toEventBridge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := newFakeSQS()
				n := 0
				fake := asgfake.New(asgfake.Options{Seed: 3, Notify: func(body string) {
					n++
					q.send(fmt.Sprintf("note%d", n), tt.wrap(body))
				}})
				fake.AddGroup("web")
				for _, id := range []string{"i-1", "i-2"} {
					if err := fake.AddInstance("web", id); err != nil {
						t.Fatal(err)
					}
				}
				// note1: TEST_NOTIFICATION; note2: i-2's action; malformed; note3: ours.
				if err := fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: 90 * time.Second,
					NotificationTargetARN: "arn:aws:sqs:us-east-1:123456789012:lifecycle"}); err != nil {
					t.Fatal(err)
				}
				if _, err := fake.Terminate("i-2"); err != nil {
					t.Fatal(err)
				}
				q.send("garbage", "not json")
				time.Sleep(time.Minute)
				ours, err := fake.Terminate("i-1")
				if err != nil {
					t.Fatal(err)
				}

				cfg := DefaultConfig()
				cfg.Sources = []string{SourceSignal, SourceSQS}
				cfg.QueueURL = "https://sqs.test/lifecycle"
				client := newASGClient(fake, nil)
				reg := prometheus.NewRegistry()
				d := Deps{AutoScaling: client, SQS: q, InstanceID: "i-1", Logger: testLogger(t), Registerer: reg}
				w, err := NewWatcher(cfg, d)
				if err != nil {
					t.Fatal(err)
				}
				fired, atFire := runWatcher(t, t.Context(), w, q)
				if len(fired) != 1 {
					t.Fatalf("fired %d triggers; want 1", len(fired))
				}
				tr := fired[0]
				a := tr.Action
				if tr.Source != SourceSQS || a == nil || a.InstanceID != "i-1" || a.ASGName != "web" || a.HookName != "drain" ||
					a.Token != ours[0].Token || a.NotificationQueueURL != cfg.QueueURL || !strings.HasPrefix(a.NotificationReceipt, "note3#") ||
					!a.Started.Equal(ours[0].Started) {
					t.Fatalf("trigger = %+v, action %+v; want our action (token %s)", tr, a, ours[0].Token)
				}
				if got := len(q.callsFor("ReceiveMessage", "")); got != atFire {
					t.Fatalf("%d ReceiveMessage calls after the trigger fired; want none", got-atFire)
				}
				if m := q.msg("note1"); !m.deleted {
					t.Error("TEST_NOTIFICATION not consumed")
				}
				if m := q.msg("note2"); m.deleted || len(q.callsFor("ChangeMessageVisibility", "note2#")) == 0 ||
					q.callsFor("ChangeMessageVisibility", "note2#")[0].visibility != 0 {
					t.Errorf("other instance's notification = %+v; want made visible again (0) and kept", m)
				}
				if m, c := q.msg("garbage"), q.callsFor("ChangeMessageVisibility", "garbage#"); m.deleted || len(c) != 1 || c[0].visibility != 30 {
					t.Errorf("malformed message = %+v (visibility calls %+v); want kept, hidden for 30 s and left to redrive", m, c)
				}
				if m := q.msg("note3"); m.deleted || len(q.callsFor("ChangeMessageVisibility", "note3#")) != 1 ||
					q.callsFor("ChangeMessageVisibility", "note3#")[0].visibility < 60 {
					t.Errorf("our notification = %+v; want kept and hidden for ≥ 60s", m)
				}

				// The drain completes: the action ends once and only then is our
				// notification deleted.
				actor := NewActor(cfg, d)
				if err := actor.Complete(t.Context(), *a, ResultContinue); err != nil {
					t.Fatal(err)
				}
				if !q.msg("note3").deleted || q.msg("note2").deleted {
					t.Error("after completion: want ours deleted and the other instance's kept")
				}
				if act, _ := fake.Action("i-1"); act.Completions != 1 || act.Result != ResultContinue {
					t.Errorf("action = %+v; want completed once", act)
				}
			})
		})
	}
}

// toEventBridge re-shapes a direct ASG notification into the EventBridge event.
func toEventBridge(body string) string {
	if strings.Contains(body, "TEST_NOTIFICATION") {
		return body // EventBridge has no test event; keep the direct one
	}
	return `{"version":"0","id":"e-1","detail-type":"EC2 Instance-terminate Lifecycle Action","source":"aws.autoscaling",` +
		`"account":"123456789012","time":"` + jsonField(body, "Time") + `","region":"us-east-1","resources":[],"detail":` + body + `}`
}

func jsonField(body, key string) string {
	i := strings.Index(body, `"`+key+`":"`)
	if i < 0 {
		return ""
	}
	rest := body[i+len(key)+4:]
	return rest[:strings.IndexByte(rest, '"')]
}

func TestSQSSourceWaitsAndIgnoresOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newFakeSQS()
		q.send("theirs", strings.ReplaceAll(directNote, `"i-1"`, `"i-2"`))
		q.send("other-hook", strings.ReplaceAll(directNote, `"drain"`, `"backup"`))
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceSQS}
		cfg.QueueURL = "https://sqs.test/lifecycle"
		cfg.HookName = "drain"
		w, err := NewWatcher(cfg, Deps{SQS: q, InstanceID: "i-1", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		fired, _ := runWatcher(t, ctx, w, q)
		if len(fired) != 0 {
			t.Fatalf("fired %+v for notifications that are not ours", fired)
		}
		for _, id := range []string{"theirs", "other-hook"} {
			if m := q.msg(id); m.deleted || m.receives < 2 {
				t.Errorf("%s = %+v; want received repeatedly and never deleted", id, m)
			}
		}
		if n := len(q.callsFor("ReceiveMessage", "")); n > 700 {
			t.Errorf("%d receives in 10 minutes; want a pause between batches of others' notices", n)
		}

		// Ours arrives later during a long poll.
		q2 := newFakeSQS()
		w2, _ := NewWatcher(cfg, Deps{SQS: q2, InstanceID: "i-1", Logger: testLogger(t)})
		go func() {
			time.Sleep(5 * time.Minute)
			q2.send("ours", directNote)
		}()
		start := time.Now()
		fired, _ = runWatcher(t, t.Context(), w2, q2)
		if len(fired) != 1 || fired[0].Action.Token != "tok-1" || time.Since(start) != 5*time.Minute {
			t.Fatalf("fired = %+v after %s; want our trigger as soon as it arrives at 5m", fired, time.Since(start))
		}
	})
}

// fakeIMDS serves scripted answers per path, in fake time.
type fakeIMDS struct {
	mu      sync.Mutex
	answers map[string]func(now time.Time) (string, int)
	calls   int
}

var _ imdsAPI = (*fakeIMDS)(nil)

func (f *fakeIMDS) GetMetadata(_ context.Context, in *imds.GetMetadataInput, _ ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	body, status := "", http.StatusNotFound
	if fn := f.answers[in.Path]; fn != nil {
		body, status = fn(time.Now())
	}
	if status != http.StatusOK {
		return nil, &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
			Err: errors.New(http.StatusText(status))}
	}
	return &imds.GetMetadataOutput{Content: io.NopCloser(strings.NewReader(body))}, nil
}

func TestIMDSSource(t *testing.T) {
	spotAt := time.Date(2000, 1, 1, 0, 10, 0, 0, time.UTC) // synctest's epoch starts 2000-01-01
	tests := []struct {
		name         string
		state        func(elapsed time.Duration) (string, int)
		spot         func(elapsed time.Duration) (string, int)
		asg          string
		wantSource   string
		wantAfter    time.Duration
		wantAction   bool
		wantDeadline time.Time
	}{
		{"terminated after 404 and InService", func(e time.Duration) (string, int) {
			switch {
			case e < time.Minute:
				return "", 404
			case e < 2*time.Minute:
				return "InService", 200
			}
			return "Terminated\n", 200
		}, nil, "web", SourceIMDS, 2 * time.Minute, true, time.Time{}},
		{"errors are retried", func(e time.Duration) (string, int) {
			if e < 3*time.Minute {
				return "", 500
			}
			return "Terminated", 200
		}, nil, "", SourceIMDS, 3 * time.Minute, true, time.Time{}},
		{"spot without lifecycle action", nil, func(e time.Duration) (string, int) {
			if e < 30*time.Second {
				return "", 404
			}
			return `{"action": "terminate", "time": "2000-01-01T00:10:00Z"}`, 200
		}, "web", sourceSpot, 30 * time.Second, false, spotAt.Add(-SpotSafetyMargin)},
		{"spot with lifecycle action", func(time.Duration) (string, int) { return "Terminated", 200 },
			func(time.Duration) (string, int) { return `{"action":"stop","time":"2000-01-01T00:10:00Z"}`, 200 },
			"web", sourceSpot, 0, true, spotAt.Add(-SpotSafetyMargin)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				f := &fakeIMDS{answers: map[string]func(time.Time) (string, int){}}
				if tt.state != nil {
					f.answers[pathTargetLifecycleState] = func(now time.Time) (string, int) { return tt.state(now.Sub(start)) }
				}
				if tt.spot != nil {
					f.answers[pathSpotInstanceAction] = func(now time.Time) (string, int) { return tt.spot(now.Sub(start)) }
				}
				fake := asgfake.New(asgfake.Options{})
				fake.AddGroup("web")
				_ = fake.AddInstance("web", "i-1")
				cfg := DefaultConfig()
				cfg.Sources = []string{SourceIMDS}
				cfg.HookName = "drain"
				cfg.ASGName = tt.asg
				reg := prometheus.NewRegistry()
				w, err := NewWatcher(cfg, Deps{IMDS: f, AutoScaling: newASGClient(fake, nil), InstanceID: "i-1", Logger: testLogger(t), Registerer: reg})
				if err != nil {
					t.Fatal(err)
				}
				fired, _ := runWatcher(t, t.Context(), w, nil)
				if len(fired) != 1 {
					t.Fatalf("fired %d; want 1", len(fired))
				}
				tr := fired[0]
				elapsed := tr.At.Sub(start)
				// The trigger comes at the first poll after the state flips: at
				// most one poll interval later, or one full backoff (jitter
				// included) when the polls before it failed.
				maxLag := cfg.IMDSPollInterval
				if strings.Contains(tt.name, "errors") {
					maxLag = imdsMaxBackoff(cfg.IMDSPollInterval) * 3 / 2
				}
				if tr.Source != tt.wantSource || elapsed < tt.wantAfter || elapsed > tt.wantAfter+maxLag {
					t.Fatalf("trigger %+v after %s; want %s at about %s", tr, elapsed, tt.wantSource, tt.wantAfter)
				}
				if !tr.Deadline.Equal(tt.wantDeadline) {
					t.Errorf("deadline = %s; want %s", tr.Deadline, tt.wantDeadline)
				}
				if (tr.Action != nil) != tt.wantAction {
					t.Fatalf("action = %+v; want present %v", tr.Action, tt.wantAction)
				}
				if tr.Action != nil && (tr.Action.InstanceID != "i-1" || tr.Action.ASGName != "web" || tr.Action.HookName != "drain" || tr.Action.Token != "") {
					t.Errorf("action = %+v; want i-1/web/drain without token", tr.Action)
				}
				if strings.Contains(tt.name, "errors") && counter(t, reg, "autodiag_lifecycle_source_errors_total", "source", "imds") == 0 {
					t.Error("source errors not counted")
				}
				// Probe agrees with the final state.
				got, err := w.Probe(t.Context())
				if err != nil || (got != nil) != (tt.state != nil) {
					t.Errorf("Probe = %+v, %v", got, err)
				}
			})
		})
	}
}

func TestProbeWithoutIMDSSource(t *testing.T) {
	w, err := NewWatcher(DefaultConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if act, err := w.Probe(t.Context()); act != nil || err != nil {
		t.Fatalf("Probe = %+v, %v; want nil, nil", act, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := w.Run(ctx, func(Trigger) { t.Error("fired") }); err != nil {
		t.Fatalf("Run on a cancelled context = %v; want nil", err)
	}
}

func TestNewWatcherChecksClients(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sources = []string{SourceIMDS, SourceSQS}
	_, err := NewWatcher(cfg, Deps{})
	if err == nil || !strings.Contains(err.Error(), "IMDS client") || !strings.Contains(err.Error(), "SQS client") || !strings.Contains(err.Error(), "instance id") {
		t.Fatalf("NewWatcher = %v; want missing clients and instance id reported", err)
	}
}

// TestScheduledTrigger: the earliest active draining event triggers
// scheduled_event_lead before its NotBefore, with NotBefore less
// SpotSafetyMargin as deadline while ahead; other codes and states do not.
func TestScheduledTrigger(t *testing.T) {
	now := time.Date(2026, 1, 7, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(d).Format(scheduledEventTimeForm) }
	ev := func(code, state string, d time.Duration) string {
		return fmt.Sprintf(`{"Code":%q,"State":%q,"EventId":"instance-event-%s","NotBefore":%q,"NotAfter":%q}`, code, state, code, at(d), at(d+time.Hour))
	}
	tests := []struct {
		name         string
		body         string
		lead         time.Duration
		wantReason   string // "" = no trigger
		wantDeadline time.Time
	}{
		{"inside the lead", "[" + ev("instance-stop", "active", 10*time.Minute) + "]", 15 * time.Minute,
			"instance-stop", now.Add(10*time.Minute - SpotSafetyMargin)},
		{"before the lead", "[" + ev("instance-stop", "active", 20*time.Minute) + "]", 15 * time.Minute, "", time.Time{}},
		{"lead 0 at NotBefore", "[" + ev("system-reboot", "active", 0) + "]", 0, "system-reboot", time.Time{}},
		{"past NotBefore", "[" + ev("instance-retirement", "active", -time.Hour) + "]", 15 * time.Minute, "instance-retirement", time.Time{}},
		{"completed and canceled ignored", "[" + ev("instance-stop", "completed", 0) + "," + ev("system-maintenance", "canceled", 0) + "]",
			15 * time.Minute, "", time.Time{}},
		{"earliest wins", "[" + ev("instance-reboot", "active", 14*time.Minute) + "," + ev("system-maintenance", "active", 5*time.Minute) + "]",
			15 * time.Minute, "system-maintenance", now.Add(5*time.Minute - SpotSafetyMargin)},
		{"none", "[]", 15 * time.Minute, "", time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ScheduledEventLead = tt.lead
			im := &imdsSource{cfg: cfg}
			tr, err := im.scheduledTrigger(tt.body, now)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantReason == "" {
				if tr != nil {
					t.Fatalf("trigger %+v; want none", tr)
				}
				return
			}
			if tr == nil || tr.Source != sourceScheduledEvent || !strings.Contains(tr.Reason, tt.wantReason) || !tr.Deadline.Equal(tt.wantDeadline) {
				t.Fatalf("trigger %+v; want %s (%s) with deadline %s", tr, sourceScheduledEvent, tt.wantReason, tt.wantDeadline)
			}
		})
	}
}
