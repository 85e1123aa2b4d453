package lifecycle

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

// imdsStandIn is a minimal IMDSv2 endpoint for what ec2-metadata-mock
// cannot serve (a warm pool's target-lifecycle-state): PUT /latest/api/token
// hands out a session token, and every metadata GET without it is refused
// with 401 as IMDSv2-only instances do. Paths not set answer 404.
type imdsStandIn struct {
	mu     sync.Mutex
	values map[string]string // path under /latest/meta-data/ → body
	gets   map[string]int    // path → GETs answered
}

const standInToken = "stand-in-token"

func newIMDSStandIn() *imdsStandIn {
	return &imdsStandIn{values: map[string]string{}, gets: map[string]int{}}
}

func (s *imdsStandIn) set(path, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[path] = value
}

func (s *imdsStandIn) getsOf(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[path]
}

func (s *imdsStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" {
		if r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") == "" {
			http.Error(w, "missing ttl", http.StatusBadRequest)
			return
		}
		w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		fmt.Fprint(w, standInToken)
		return
	}
	if r.Header.Get("X-aws-ec2-metadata-token") != standInToken {
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/latest/meta-data/")
	if r.Method != http.MethodGet || !ok {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	v, ok := s.values[path]
	if ok {
		s.gets[path]++
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	fmt.Fprint(w, v)
}

// standInClient is the SDK's IMDS client served by s in process, so it runs
// inside a synctest bubble.
func standInClient(s *imdsStandIn) *imds.Client {
	return imds.New(imds.Options{Endpoint: "http://169.254.169.254", HTTPClient: inProcess{s},
		// In process, never on the network: enabled even where the
		// caller's shell sets AWS_EC2_METADATA_DISABLED=true.
		ClientEnableState: imds.ClientEnabled})
}

// TestWarmPool: while the target state is Warmed:Running the agent is
// told to wait (Warmed, WaitInService blocks) and nothing triggers a drain;
// WaitInService returns within one poll of InService, saying the instance
// came from the warm pool; a later Terminated drains as usual.
func TestWarmPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newIMDSStandIn()
		s.set(pathTargetLifecycleState, "Warmed:Running")
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceSignal, SourceIMDS}
		cfg.HookName = "drain"
		cfg.ASGName = "web"
		w, err := NewWatcher(cfg, Deps{IMDS: standInClient(s), InstanceID: "i-1", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if _, known := w.State(); known {
			t.Fatal("state known before any poll")
		}
		var fired []Trigger
		runDone := make(chan struct{})
		go func() {
			defer close(runDone)
			_ = w.Run(t.Context(), func(tr Trigger) { fired = append(fired, tr) })
		}()
		type waited struct {
			at     time.Time
			warmed bool
			err    error
		}
		inService := make(chan waited, 1)
		go func() {
			warmed, err := w.WaitInService(t.Context())
			inService <- waited{time.Now(), warmed, err}
		}()

		time.Sleep(10 * cfg.IMDSPollInterval)
		synctest.Wait()
		if st, known := w.State(); st != "Warmed:Running" || !known || !w.Warmed() {
			t.Fatalf("State = %q, %v, Warmed = %v; want Warmed:Running", st, known, w.Warmed())
		}
		select {
		case r := <-inService:
			t.Fatalf("WaitInService returned %+v while warmed", r)
		default:
		}
		if len(fired) != 0 {
			t.Fatalf("fired %+v while warmed; want nothing", fired)
		}
		if n := s.getsOf(pathTargetLifecycleState); n < 10 {
			t.Fatalf("%d polls of the state in 10 poll intervals; want ≥ 10", n)
		}

		changed := w.StateChanged()
		s.set(pathTargetLifecycleState, "InService")
		flipped := time.Now()
		r := <-inService
		if r.err != nil || !r.warmed {
			t.Fatalf("WaitInService = %v, %v; want warmed=true, nil", r.warmed, r.err)
		}
		if lag := r.at.Sub(flipped); lag > cfg.IMDSPollInterval {
			t.Fatalf("WaitInService returned %s after InService; want within one poll interval (%s)", lag, cfg.IMDSPollInterval)
		}
		select {
		case <-changed:
		default:
			t.Fatal("StateChanged not closed by the change to InService")
		}
		if w.Warmed() {
			t.Fatal("Warmed after InService")
		}

		s.set(pathTargetLifecycleState, "Terminated")
		<-runDone
		if len(fired) != 1 || fired[0].Source != SourceIMDS || fired[0].Action == nil || fired[0].Action.HookName != "drain" {
			t.Fatalf("fired %+v; want one imds trigger with the drain hook's action", fired)
		}
	})
}

// TestWarmedTerminatedDrains: an instance terminated while in the warm pool
// (Warmed:Terminated) has its terminating hook's action waiting like any
// other, and a WaitInService in progress keeps waiting (the agent drains
// instead).
func TestWarmedTerminatedDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newIMDSStandIn()
		s.set(pathTargetLifecycleState, "Warmed:Stopped")
		fake := asgfake.New(asgfake.Options{})
		fake.AddGroup("web")
		_ = fake.AddInstance("web", "i-1")
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceIMDS}
		cfg.HookName = "drain"
		w, err := NewWatcher(cfg, Deps{IMDS: standInClient(s), AutoScaling: newASGClient(fake, nil), InstanceID: "i-1", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if act, err := w.Probe(t.Context()); act != nil || err != nil {
			t.Fatalf("Probe while Warmed:Stopped = %+v, %v; want nothing", act, err)
		}
		time.AfterFunc(time.Minute, func() { s.set(pathTargetLifecycleState, StateWarmedTerminated) })
		fired, _ := runWatcher(t, t.Context(), w, nil)
		if len(fired) != 1 || fired[0].Source != SourceIMDS || fired[0].Action == nil {
			t.Fatalf("fired %+v; want one imds trigger with an action", fired)
		}
		if a := fired[0].Action; a.ASGName != "web" || a.HookName != "drain" || a.Token != "" {
			t.Fatalf("action = %+v; want web/drain by instance id", a)
		}
		if !strings.Contains(fired[0].Reason, StateWarmedTerminated) {
			t.Fatalf("reason %q does not name the state", fired[0].Reason)
		}
	})
}

// TestWaitInServiceWithoutIMDS: with no imds source there is no warm pool
// to wait for.
func TestWaitInServiceWithoutIMDS(t *testing.T) {
	w, err := NewWatcher(DefaultConfig(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if warmed, err := w.WaitInService(t.Context()); warmed || err != nil {
		t.Fatalf("WaitInService = %v, %v; want false, nil at once", warmed, err)
	}
}

// TestReturnToWarmPoolDrains: an instance in service sent back to its warm
// pool (scale-in with instance reuse) has its terminating hook's action
// waiting: it drains like a terminated one. One that starts warmed does not.
func TestReturnToWarmPoolDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newIMDSStandIn()
		s.set(pathTargetLifecycleState, StateInService)
		cfg := DefaultConfig()
		cfg.Sources = []string{SourceIMDS}
		cfg.HookName = "drain"
		cfg.ASGName = "web"
		w, err := NewWatcher(cfg, Deps{IMDS: standInClient(s), InstanceID: "i-1", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(time.Minute, func() { s.set(pathTargetLifecycleState, "Warmed:Running") })
		fired, _ := runWatcher(t, t.Context(), w, nil)
		if len(fired) != 1 || fired[0].Action == nil || fired[0].Action.HookName != "drain" || !strings.Contains(fired[0].Reason, "Warmed:Running") {
			t.Fatalf("fired %+v; want one imds trigger with the drain hook's action", fired)
		}
		if act, err := w.Probe(t.Context()); act == nil || err != nil {
			t.Fatalf("Probe = %+v, %v; want the action", act, err)
		}
	})
}
