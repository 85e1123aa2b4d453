package lifecycle

import (
	"context"
	"errors"
	"net/http/httptrace"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

// TestOrphanedNotificationDeleted: another instance's notice is shown
// again while its action may be alive, and deleted (logged, counted) once
// its heartbeat timeout has passed and no agent claims the instance.
func TestOrphanedNotificationDeleted(t *testing.T) {
	tests := []struct {
		name        string
		hbt         time.Duration // hook_heartbeat_timeout configured (0 = unknown)
		claimed     func(context.Context, string) (bool, error)
		wantDeleted time.Duration // when the notice goes (0 = kept for the whole test)
	}{
		{"past the configured heartbeat timeout", 90 * time.Second, nil, 90 * time.Second},
		{"unknown timeout waits for the API maximum", 0, nil, 2 * time.Hour},
		{"unclaimed", 90 * time.Second, func(context.Context, string) (bool, error) { return false, nil }, 90 * time.Second},
		{"claimed by an agent", 90 * time.Second, func(context.Context, string) (bool, error) { return true, nil }, 0},
		{"claims unknown", 90 * time.Second, func(context.Context, string) (bool, error) { return false, errors.New("redis down") }, 0},
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
				start := time.Now()
				if _, err := fake.Terminate("i-2"); err != nil { // i-2's agent never takes it
					t.Fatal(err)
				}
				cfg := DefaultConfig()
				cfg.Sources = []string{SourceSQS}
				cfg.QueueURL = *sqsReceive.QueueUrl
				cfg.HookHeartbeatTimeout = tt.hbt
				if tt.hbt == 0 {
					cfg.HeartbeatInterval = 30 * time.Second
				}
				reg := prometheus.NewRegistry()
				w, err := NewWatcher(cfg, Deps{SQS: q, InstanceID: "i-1", Logger: testLogger(t), Registerer: reg, Claimed: tt.claimed})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 3*time.Hour)
				defer cancel()
				if err := w.Run(ctx, func(tr Trigger) { t.Errorf("fired %+v; want nothing (not our instance)", tr) }); err != nil {
					t.Fatal(err)
				}
				dels := q.callsFor("DeleteMessage", "note-i-2")
				orphaned := counter(t, reg, "autodiag_lifecycle_orphaned_notifications_total", "transition", "terminating")
				if tt.wantDeleted == 0 {
					if len(dels) != 0 || orphaned != 0 || q.msg("note-i-2").deleted {
						t.Fatalf("deleted %d times (metric %v); want kept", len(dels), orphaned)
					}
					return
				}
				if len(dels) != 1 || orphaned != 1 || !q.msg("note-i-2").deleted {
					t.Fatalf("deleted %d times (metric %v); want once", len(dels), orphaned)
				}
				// At the first receive after the limit: at most one foreign
				// pause later.
				if at := dels[0].at.Sub(start); at < tt.wantDeleted || at > tt.wantDeleted+foreignPause {
					t.Fatalf("deleted at +%s; want at +%s", at, tt.wantDeleted)
				}
				// Until then it was shown again for its owner each time.
				if n := len(q.callsFor("ChangeMessageVisibility", "note-i-2")); n == 0 {
					t.Fatal("never shown again before its deletion")
				}
			})
		})
	}
}

// TestOwnLaunchingNotificationDeleted: the launch gate completes this
// instance's launching action by instance id, so its notice is deleted
// rather than cycled; a launching notice of a hook we do not complete is
// left alone.
func TestOwnLaunchingNotificationDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newFakeSQS()
		n := 0
		fake := asgfake.New(asgfake.Options{Seed: 4, Notify: func(body string) { n++; q.send([]string{"", "own-other", "own-ready"}[n], body) }})
		fake.AddGroup("web")
		for _, h := range []string{"ready", "other"} {
			if err := fake.PutHook(asgfake.Hook{Group: "web", Name: h, Transition: asgfake.TransitionLaunching}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := fake.Launch("web", "i-1", asgfake.PlaceGroup); err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceSQS}
		cfg.QueueURL = *sqsReceive.QueueUrl
		cfg.LaunchHookName = "ready"
		w, err := NewWatcher(cfg, Deps{SQS: q, InstanceID: "i-1", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if fired, _ := runWatcher(t, ctx, w, nil); len(fired) != 0 {
			t.Fatalf("fired %+v; want nothing", fired)
		}
		// Notify order follows the sorted hook names: other, then ready.
		ready, other := q.msg("own-ready"), q.msg("own-other")
		if !ready.deleted || other.deleted {
			t.Fatalf("ready deleted %v, other deleted %v; want only the launch hook's notice deleted", ready.deleted, other.deleted)
		}
	})
}

// graceSQS answers ReceiveMessage like a transport whose answer has begun
// (the httptrace hook fires) but whose body arrives only when release is
// closed; a cancelled context cuts it off first, as the SDK does.
type graceSQS struct {
	*fakeSQS
	begun   chan struct{}
	release chan struct{}
	msg     types.Message
	answer  bool // false: an idle long poll (no answer begins)
}

func (g *graceSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if g.answer {
		if tr := httptrace.ContextClientTrace(ctx); tr != nil && tr.GotFirstResponseByte != nil {
			tr.GotFirstResponseByte()
		}
	}
	close(g.begun)
	select {
	case <-g.release:
		return &sqs.ReceiveMessageOutput{Messages: []types.Message{g.msg}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestNotificationReceiveGrace: a notice on the wire when the watcher
// stops is taken (another instance's is shown again at once; ours reaches
// Run, which releases it), not left hidden until its visibility timeout;
// an idle poll is aborted when the grace ends.
func TestNotificationReceiveGrace(t *testing.T) {
	// Sent just now: well inside the action's heartbeat timeout.
	now := time.Now().UTC().Format(time.RFC3339)
	foreign := `{"Origin":"AutoScalingGroup","Destination":"EC2","Time":"` + now + `","LifecycleActionToken":"tok-2","AutoScalingGroupName":"web","LifecycleHookName":"drain","EC2InstanceId":"i-2","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`
	ours := `{"Origin":"AutoScalingGroup","Destination":"EC2","Time":"` + now + `","LifecycleActionToken":"tok-1","AutoScalingGroupName":"web","LifecycleHookName":"drain","EC2InstanceId":"i-1","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`
	tests := []struct {
		name       string
		body       string
		answer     bool
		wantShown  bool // ChangeMessageVisibility 0 for the receipt
		wantBegun  bool
		wantFiring bool
	}{
		{"another instance's notice", foreign, true, true, true, false},
		{"our notice", ours, true, true, true, false},
		{"idle poll", foreign, false, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &graceSQS{fakeSQS: newFakeSQS(), begun: make(chan struct{}), release: make(chan struct{}), answer: tt.answer,
				msg: types.Message{MessageId: aws.String("m-1"), ReceiptHandle: aws.String("h-1"), Body: aws.String(tt.body)}}
			cfg := DefaultConfig()
			cfg.Sources = []string{SourceSQS}
			cfg.QueueURL = *sqsReceive.QueueUrl
			w, err := NewWatcher(cfg, Deps{SQS: g, InstanceID: "i-1", Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			decided := make(chan bool, 1)
			w.sqs.onGraceDecided = func(begun bool) { decided <- begun }
			ctx, cancel := context.WithCancel(t.Context())
			var fired []Trigger
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx, func(tr Trigger) { fired = append(fired, tr) }) }()
			<-g.begun
			cancel()
			if begun := <-decided; begun != tt.wantBegun {
				t.Fatalf("grace decided answering=%v; want %v", begun, tt.wantBegun)
			}
			if tt.answer {
				close(g.release) // the rest of the answer arrives after the grace
			}
			if err := <-done; err != nil {
				t.Fatalf("Run = %v", err)
			}
			if !tt.answer {
				close(g.release) // an idle poll was aborted: nothing comes
			}
			if len(fired) != 0 {
				t.Fatalf("fired %+v after the stop; want nothing", fired)
			}
			var shown bool
			for _, c := range g.callsFor("ChangeMessageVisibility", "h-1") {
				shown = shown || c.visibility == 0
			}
			if shown != tt.wantShown {
				t.Fatalf("shown again = %v; want %v (calls %+v)", shown, tt.wantShown, g.callsFor("", ""))
			}
		})
	}
}
