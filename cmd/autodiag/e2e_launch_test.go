package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/testenv"
	"github.com/autodiag/autodiag/lifecycle"
)

// The launch end-to-end tests: the real binary holds its launching
// lifecycle action until its readiness checks pass, takes no work while
// the instance sits in a warm pool, and drains on the notices drain_on
// lists.

const (
	lnHook     = "launch-hook"
	lnInstance = "i-0aaa00000000000a1" // launched by the tests, not yet in the group
	// lnPoll is imds_poll_interval of the warm pool and notice tests.
	lnPoll = 200 * time.Millisecond
)

// lnLab is the lifecycle lab with a launching hook (heartbeat timeout 30s,
// default result ABANDON) and lnInstance launched into dest.
func lnLab(t *testing.T, dest string) *lcLab {
	t.Helper()
	l := lcNewLab(t, lcLabOptions{})
	if err := l.asg.PutHook(asgfake.Hook{Group: lcLabASG, Name: lnHook, Transition: asgfake.TransitionLaunching,
		HeartbeatTimeout: 30 * time.Second, DefaultResult: asgfake.ResultAbandon}); err != nil {
		t.Fatal(err)
	}
	if acts, err := l.asg.Launch(lcLabASG, lnInstance, dest); err != nil || len(acts) != 1 {
		t.Fatalf("Launch = %v, %v", acts, err)
	}
	return l
}

// lnConfig is the lab's config for lnInstance with lifecycleYAML, and
// redis at redisAddr ("" = the lab's).
func lnConfig(l *lcLab, redisAddr, lifecycleYAML string) string {
	c := strings.Replace(lnShortPolls(l.config(2, lifecycleYAML)), "instance_id: "+lcMockInstance, "instance_id: "+lnInstance, 1)
	if redisAddr != "" {
		c = strings.Replace(c, "redis://"+l.redis+"/0", "redis://"+redisAddr+"/0", 1)
	}
	return c
}

// lnShortPolls makes the task queue's long polls short: the recorder
// logs a call when it ends, and the tests look at when the first began.
func lnShortPolls(c string) string { return strings.Replace(c, "wait_time: 20s", "wait_time: 1s", 1) }

// lnLaunching returns the fake's launching actions of lnInstance, oldest
// first.
func lnLaunching(l *lcLab) []asgfake.Action {
	var out []asgfake.Action
	for _, a := range l.asg.Actions() {
		if a.InstanceID == lnInstance && a.Transition == asgfake.TransitionLaunching {
			out = append(out, a)
		}
	}
	return out
}

// lnEnded waits for the n-th launching action to end and returns it.
func lnEnded(t *testing.T, l *lcLab, n int, within time.Duration) asgfake.Action {
	t.Helper()
	var act asgfake.Action
	eventually(t, within, fmt.Sprintf("launching action %d ended", n), func() bool {
		acts := lnLaunching(l)
		if len(acts) < n || !acts[n-1].Ended {
			return false
		}
		act = acts[n-1]
		return true
	})
	return act
}

// lnCompletes returns the recorded CompleteLifecycleAction calls answered 200.
func lnCompletes(l *lcLab) []lcCall {
	var out []lcCall
	for _, c := range l.asgRec.log("CompleteLifecycleAction", "") {
		if c.Status == http.StatusOK {
			out = append(out, c)
		}
	}
	return out
}

// redisGate forwards TCP connections to a Redis while open and closes
// them at once while shut: Redis "down" and "back" for the agent.
type redisGate struct {
	ln   net.Listener
	to   string
	open atomic.Bool
	wg   sync.WaitGroup
}

func newRedisGate(t *testing.T, to string) *redisGate {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &redisGate{ln: ln, to: to}
	g.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !g.open.Load() {
				c.Close()
				continue
			}
			g.wg.Go(func() { g.pipe(t, c) })
		}
	})
	t.Cleanup(func() { ln.Close(); g.wg.Wait() })
	return g
}

func (g *redisGate) pipe(t *testing.T, c net.Conn) {
	defer c.Close()
	var d net.Dialer
	up, err := d.DialContext(t.Context(), "tcp", g.to)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
}

func (g *redisGate) addr() string { return g.ln.Addr().String() }

// TestLaunchHookE2E: the launching action is completed exactly once, after
// the readiness checks pass, and no task is received before; Redis down
// past launch_timeout abandons the launch (no work taken), Redis back
// within it continues.
func TestLaunchHookE2E(t *testing.T) {
	// Parallel: it waits out launch_timeout and LaunchRecheck, on its own lab (fakes,
	// ec2-metadata-mock, Redis prefix).
	t.Parallel()
	const launchYAML = "  sources: [signal]\n  asg_name: " + lcLabASG + "\n  launch_hook_name: " + lnHook +
		"\n  launch_timeout: %s\n  heartbeat_interval: 5s\n  drain_timeout: 1m\n"

	t.Run("continue once ready", func(t *testing.T) {
		l := lnLab(t, asgfake.PlaceGroup)
		p := startProc(t, lnConfig(l, "", fmt.Sprintf(launchYAML, "1m")), l.env()...)
		act := lnEnded(t, l, 1, 30*time.Second)
		if act.EndReason != asgfake.EndCompleted || act.Result != asgfake.ResultContinue || act.Completions != 1 {
			t.Fatalf("launching action %+v; want completed CONTINUE once", act)
		}
		eventually(t, 10*time.Second, "intake polling", func() bool { return len(l.sqsRec.log("ReceiveMessage", lcTaskQueue)) > 0 })
		done := lnCompletes(l)
		if len(done) != 1 {
			t.Fatalf("%d successful CompleteLifecycleAction calls, want 1", len(done))
		}
		first := l.sqsRec.log("ReceiveMessage", lcTaskQueue)[0]
		if first.Start.Before(done[0].End) {
			t.Errorf("first ReceiveMessage at %s, before the launch completed at %s", first.Start, done[0].End)
		}
		t.Logf("first ReceiveMessage %s after the launch completion", lcMS(first.Start.Sub(done[0].End)))
		if code := p.getCode("/readyz"); code != http.StatusOK {
			t.Errorf("/readyz = %d once launched", code)
		}
		st := p.status()
		launch, _ := st["launch"].(map[string]any)
		if launch["completed"] != true || launch["result"] != "CONTINUE" || launch["ready"] != true {
			t.Errorf("/v1/status launch = %v", launch)
		}
		p.signal(syscall.SIGTERM)
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0", code)
		}
	})

	t.Run("abandon when redis stays down", func(t *testing.T) {
		l := lnLab(t, asgfake.PlaceGroup)
		gate := newRedisGate(t, l.redis) // shut
		const launchTimeout = 4 * time.Second
		p := startProc(t, lnConfig(l, gate.addr(), fmt.Sprintf(launchYAML, launchTimeout)), l.env()...)
		act := lnEnded(t, l, 1, launchTimeout+30*time.Second)
		if act.EndReason != asgfake.EndCompleted || act.Result != asgfake.ResultAbandon || act.Completions != 1 {
			t.Fatalf("launching action %+v; want completed ABANDON once", act)
		}
		// The line precedes the completion call, but the harness reads the
		// agent's stderr on its own goroutine.
		const abandonMsg = "not ready by launch_timeout; abandoning the launch (the instance is replaced)"
		eventually(t, 10*time.Second, "the abandon log line", func() bool { return len(p.logs(abandonMsg)) > 0 })
		if ls := p.logs(abandonMsg); len(ls) != 1 || !strings.Contains(fmt.Sprint(ls[0]["failing"]), "redis") {
			t.Errorf("abandon log lines %v; want one naming redis", ls)
		}
		eventually(t, 10*time.Second, "/readyz abandoned", func() bool { return p.getCode("/readyz") == http.StatusServiceUnavailable })
		if st := p.status(); st["state"] != "abandoned" {
			t.Errorf("/v1/status state %v, want abandoned", st["state"])
		}
		if n := len(l.sqsRec.log("ReceiveMessage", lcTaskQueue)); n != 0 {
			t.Errorf("%d ReceiveMessage calls on the task queue after an abandoned launch", n)
		}
		p.signal(syscall.SIGTERM)
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0", code)
		}
	})

	t.Run("continue when redis returns in time", func(t *testing.T) {
		l := lnLab(t, asgfake.PlaceGroup)
		gate := newRedisGate(t, l.redis)
		p := startProc(t, lnConfig(l, gate.addr(), fmt.Sprintf(launchYAML, "1m")), l.env()...)
		eventually(t, 30*time.Second, "a failed redis check on /v1/status", func() bool {
			launch, _ := p.status()["launch"].(map[string]any)
			checks, _ := launch["checks"].([]any)
			for _, c := range checks {
				if m, _ := c.(map[string]any); m["name"] == "redis" && m["ok"] == false {
					return true
				}
			}
			return false
		})
		if acts := lnLaunching(l); acts[0].Ended {
			t.Fatalf("launching action ended while Redis was down: %+v", acts[0])
		}
		gate.open.Store(true)
		act := lnEnded(t, l, 1, lifecycle.LaunchRecheck+30*time.Second)
		if act.Result != asgfake.ResultContinue || act.Completions != 1 || act.Heartbeats == 0 {
			t.Fatalf("launching action %+v; want CONTINUE once, heartbeated while waiting", act)
		}
		eventually(t, 10*time.Second, "intake polling", func() bool { return len(l.sqsRec.log("ReceiveMessage", lcTaskQueue)) > 0 })
		if code, _ := p.post("/v1/drain", ""); code != http.StatusAccepted {
			t.Fatalf("POST /v1/drain = %d", code)
		}
		if code := p.wait(60 * time.Second); code != exitDrained {
			t.Fatalf("exit %d after POST /v1/drain, want %d", code, exitDrained)
		}
	})
}

// lnIMDS is a minimal IMDSv2 endpoint for what ec2-metadata-mock cannot
// serve (a warm pool's target-lifecycle-state): PUT /latest/api/token
// hands out a token, metadata GETs without it answer 401, unset paths 404.
type lnIMDS struct {
	mu      sync.Mutex
	values  map[string]string
	gets    map[string]int
	setAt   map[string]time.Time
	answers map[string][]lnAnswer
}

// lnAnswer is a value lnIMDS answered a GET with, and when.
type lnAnswer struct {
	at    time.Time
	value string
}

const lnToken = "stand-in-token"

func newLnIMDS(t *testing.T) (*lnIMDS, string) {
	s := &lnIMDS{values: map[string]string{}, gets: map[string]int{}, setAt: map[string]time.Time{}, answers: map[string][]lnAnswer{}}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

func (s *lnIMDS) set(path, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[path], s.setAt[path] = v, time.Now()
}

func (s *lnIMDS) getsOf(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[path]
}

// answeredBefore is how many GETs of path were answered value before t.
func (s *lnIMDS) answeredBefore(path, value string, t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, a := range s.answers[path] {
		if a.value == value && a.at.Before(t) {
			n++
		}
	}
	return n
}

func (s *lnIMDS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" {
		w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		fmt.Fprint(w, lnToken)
		return
	}
	if r.Header.Get("X-aws-ec2-metadata-token") != lnToken {
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	path, _ := strings.CutPrefix(r.URL.Path, "/latest/meta-data/")
	s.mu.Lock()
	v, ok := s.values[path]
	s.gets[path]++
	if ok {
		s.answers[path] = append(s.answers[path], lnAnswer{at: time.Now(), value: v})
	}
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	fmt.Fprint(w, v)
}

const lnStatePath = "autoscaling/target-lifecycle-state"

// lnRecordState is lnInstance's state in the fleet's instance records.
func lnRecordState(t *testing.T, fleet state.Store) string {
	t.Helper()
	ins, err := fleet.Instances(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range ins {
		if in.ID == lnInstance {
			return in.State
		}
	}
	return ""
}

// TestWarmPoolE2E: launched into a warm pool (Warmed:Running), the agent
// completes the launch hook for the pool, takes no work while warmed
// (/readyz 503, state warmed, no ReceiveMessage), and when the instance
// leaves the pool completes the second launching action and starts intake
// within one poll interval of InService; sent back to the pool, it drains,
// completes the terminating hook and exits 75.
func TestWarmPoolE2E(t *testing.T) {
	l := lnLab(t, asgfake.PlaceWarmPool)
	md, mdURL := newLnIMDS(t)
	md.set(lnStatePath, asgfake.WarmedRunning)
	l.imdsURL = mdURL
	p := startProc(t, lnConfig(l, "", fmt.Sprintf("  sources: [signal, imds]\n  asg_name: %s\n  hook_name: %s\n  launch_hook_name: %s\n"+
		"  imds_poll_interval: %s\n  heartbeat_interval: 5s\n  drain_timeout: 1m\n", lcLabASG, lcLabHook, lnHook, lnPoll)), l.env()...)

	pool := lnEnded(t, l, 1, 30*time.Second)
	if pool.Destination != asgfake.PlaceWarmPool || pool.Result != asgfake.ResultContinue || pool.Completions != 1 {
		t.Fatalf("warm pool launching action %+v; want CONTINUE once", pool)
	}
	// Warmed for a few more polls: nothing is received.
	seen := md.getsOf(lnStatePath)
	eventually(t, 10*time.Second, "three more polls while warmed", func() bool { return md.getsOf(lnStatePath) >= seen+3 })
	if code := p.getCode("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d while warmed, want 503", code)
	}
	if st := p.status(); st["state"] != "warmed" {
		t.Errorf("/v1/status state %v while warmed", st["state"])
	}
	if n := len(l.sqsRec.log("ReceiveMessage", lcTaskQueue)); n != 0 {
		t.Fatalf("%d ReceiveMessage calls while Warmed:Running", n)
	}
	// The fleet view (autodiag status) says warmed too, without waiting
	// for the record's periodic refresh.
	rc, _ := sqsRedis(t)
	fleet := state.NewRedis(rc, state.RedisOptions{Prefix: l.prefix})
	if st := lnRecordState(t, fleet); st != "warmed" {
		t.Errorf("instance record state %q while warmed", st)
	}

	if _, err := l.asg.LeaveWarmPool(lnInstance); err != nil {
		t.Fatal(err)
	}
	md.set(lnStatePath, "InService")
	md.mu.Lock()
	inService := md.setAt[lnStatePath]
	md.mu.Unlock()
	eventually(t, 10*time.Second, "intake polling", func() bool { return len(l.sqsRec.log("ReceiveMessage", lcTaskQueue)) > 0 })
	first := l.sqsRec.log("ReceiveMessage", lcTaskQueue)[0]
	// One poll sees InService; the second gate's checks and completion are
	// a few loopback round trips, which wait on no timer: under one more
	// poll interval. Counted in the watcher's own polls rather than wall
	// time, since a loaded machine slows those polls (round trips to this
	// process, ticks that coalesce) along with the gate; intake that waited
	// for a later poll or a launch recheck would see more of them.
	lag := first.Start.Sub(inService)
	reads := md.answeredBefore(lnStatePath, "InService", first.Start)
	if reads < 1 || reads > 3 {
		t.Errorf("the watcher read InService %d times before the first ReceiveMessage (%s after InService); want the first read, and at most two polls more",
			reads, lcMS(lag))
	}
	t.Logf("first ReceiveMessage %s after IMDS said InService, after %d reads of it (imds_poll_interval %s)", lcMS(lag), reads, lnPoll)
	group := lnEnded(t, l, 2, 10*time.Second)
	if group.Destination != asgfake.PlaceGroup || group.Result != asgfake.ResultContinue || group.Completions != 1 {
		t.Fatalf("group launching action %+v; want CONTINUE once", group)
	}
	if n := len(lnCompletes(l)); n != 2 {
		t.Errorf("%d successful completions, want 2 (pool, group)", n)
	}
	if code := p.getCode("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d in service", code)
	}
	eventually(t, 5*time.Second, "instance record running", func() bool { return lnRecordState(t, fleet) == "running" })

	// Scale-in with instance reuse: back to the pool through the
	// terminating hook. The agent completes it and exits 75, so systemd
	// starts it again to wait in the pool.
	if acts, err := l.asg.Terminate(lnInstance); err != nil || len(acts) != 1 {
		t.Fatalf("Terminate = %v, %v", acts, err)
	}
	md.set(lnStatePath, asgfake.WarmedRunning)
	if code := p.wait(60 * time.Second); code != exitDrained {
		t.Fatalf("exit %d after the return to the warm pool, want %d", code, exitDrained)
	}
	if act, _ := l.asg.Action(lnInstance); act.Transition != asgfake.TransitionTerminating || act.EndReason != asgfake.EndCompleted {
		t.Errorf("terminating action %+v; want completed by the agent", act)
	}
}

// lnMetadataMock runs ec2-metadata-mock with args (IMDSv2 only) behind a
// proxy that counts the GETs of each metadata path; it returns the
// proxy's URL and the counter.
func lnMetadataMock(t *testing.T, args ...string) (string, func(path string) int) {
	t.Helper()
	mockURL, _ := testenv.StartMetadataMock(t, append(args, "--imdsv2")...)
	target, _ := url.Parse(mockURL)
	var mu sync.Mutex
	gets := map[string]int{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = log.New(io.Discard, "", 0) // the agent outlives the mock at cleanup
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if path, ok := strings.CutPrefix(r.URL.Path, "/latest/meta-data/"); ok {
			mu.Lock()
			gets[path]++
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, func(path string) int { mu.Lock(); defer mu.Unlock(); return gets[path] }
}

// TestDrainOnNoticesE2E: a rebalance recommendation and an active
// instance-stop event, served by ec2-metadata-mock, each drain the agent
// (exit 0, the drain's source and reason on /v1/status) when drain_on
// lists them, and are ignored (not even read) when it does not.
func TestDrainOnNoticesE2E(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		path    string
		drainOn string
		source  string // "" = ignored
	}{
		{"rebalance configured", []string{"spot", "-d", "3600", "--rebalance-delay-sec", "0"}, "events/recommendations/rebalance",
			"[spot_interruption, rebalance_recommendation]", lifecycle.TriggerRebalance},
		{"rebalance ignored", []string{"spot", "-d", "3600", "--rebalance-delay-sec", "0"}, "events/recommendations/rebalance",
			"[spot_interruption]", ""},
		{"instance-stop configured", []string{"events", "-o", "instance-stop", "-t", "active"}, "events/maintenance/scheduled",
			"[scheduled_event]", lifecycle.TriggerMaintenance},
		{"instance-stop ignored", []string{"events", "-o", "instance-stop", "-t", "active"}, "events/maintenance/scheduled",
			"[spot_interruption]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lcNewLab(t, lcLabOptions{})
			mdURL, gets := lnMetadataMock(t, tc.args...)
			l.imdsURL = mdURL
			p := startProc(t, lnShortPolls(l.config(2, fmt.Sprintf("  sources: [signal, imds]\n  asg_name: %s\n  hook_name: %s\n"+
				"  imds_poll_interval: %s\n  drain_on: %s\n  heartbeat_interval: 5s\n  drain_timeout: 1m\n",
				lcLabASG, lcLabHook, lnPoll, tc.drainOn))), l.env()...)
			if tc.source == "" {
				seen := gets(lnStatePath)
				eventually(t, 10*time.Second, "five more polls", func() bool { return gets(lnStatePath) >= seen+5 })
				if st := p.status(); st["state"] != "running" || gets(tc.path) != 0 {
					t.Fatalf("state %v, %d reads of %s; want running, never read", st["state"], gets(tc.path), tc.path)
				}
				if code := p.getCode("/readyz"); code != http.StatusOK {
					t.Fatalf("/readyz = %d", code)
				}
				p.signal(syscall.SIGTERM)
				if code := p.wait(60 * time.Second); code != 0 {
					t.Fatalf("exit %d after SIGTERM, want 0", code)
				}
				return
			}
			if code := p.wait(60 * time.Second); code != 0 {
				t.Fatalf("exit %d after a %s drain, want 0", code, tc.source)
			}
			_, line := lcFirstLog(t, p, "drain started")
			if line["source"] != tc.source || line["reason"] == "" {
				t.Fatalf("drain started %v; want source %s with a reason", line, tc.source)
			}
		})
	}
}

// TestNoActionSettleE2E: IMDS says Terminated before the action is visible
// to the Auto Scaling API (the fake hides it for 5s): the agent's
// completion answered "No active Lifecycle Action found" is retried, not
// counted as done, and the action is completed exactly once when it
// appears.
func TestNoActionSettleE2E(t *testing.T) {
	// Parallel: it waits out the hidden action and NoActionSettle, on its own lab.
	t.Parallel()
	var l *lcLab
	var noAction int
	// The action is hidden from when IMDS says Terminated, 1 s after the
	// mock's start: an agent that comes up later than the action appears
	// completes it at once, and the scene is set again with it hidden
	// longer.
	lcScaledScene(t, func(k float64) bool {
		hidden := time.Duration(k * float64(5*time.Second))
		l = lcNewLab(t, lcLabOptions{visibleAfter: hidden})
		l.startIMDSMock(time.Second)
		p := startProc(t, lnShortPolls(l.config(2, fmt.Sprintf("  sources: [signal, imds]\n  asg_name: %s\n  imds_poll_interval: %s\n"+
			lcLifecycleBase, lcLabASG, lnPoll, 5*time.Second))), l.env()...)
		if code := l.wait(p, hidden+lifecycle.NoActionSettle+30*time.Second); code != 0 {
			t.Fatalf("exit %d, want 0", code)
		}
		noAction = 0
		for _, c := range l.asgRec.log("CompleteLifecycleAction", "") {
			if c.Status != http.StatusOK {
				noAction++
			}
		}
		return noAction > 0
	})
	act, ok := l.asg.Action(lcMockInstance)
	if !ok || act.EndReason != asgfake.EndCompleted || act.Completions != 1 {
		t.Fatalf("action %+v; want completed once by the agent", act)
	}
	if ok := len(lnCompletes(l)); ok != 1 {
		t.Fatalf("%d successful and %d refused completions; want 1 after at least one no_action", ok, noAction)
	}
	t.Logf("%d no_action answers before the one completion", noAction)
}
