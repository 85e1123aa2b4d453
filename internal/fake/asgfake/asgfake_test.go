package asgfake_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/smithy-go"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/fake/asgfake"
)

var t0 = time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC)

// env is a fake service on a real HTTP server with a real SDK client.
type env struct {
	clock  *clock.Manual
	fake   *asgfake.Server
	client *autoscaling.Client
	notes  *notes
}

type notes struct {
	mu     sync.Mutex
	bodies []string
}

func (n *notes) add(b string) { n.mu.Lock(); n.bodies = append(n.bodies, b); n.mu.Unlock() }
func (n *notes) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.bodies...)
}

func newEnv(t *testing.T, retryer aws.Retryer) *env {
	t.Helper()
	e := &env{clock: clock.NewManual(t0), notes: &notes{}}
	e.fake = asgfake.New(asgfake.Options{Now: e.clock.Now, Seed: 1, Notify: e.notes.add})
	ts := httptest.NewServer(e.fake)
	t.Cleanup(ts.Close)
	e.client = NewClient(ts.URL, retryer)
	e.fake.AddGroup("web")
	for _, id := range []string{"i-1", "i-2"} {
		if err := e.fake.AddInstance("web", id); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// NewClient is the real SDK client pointed at url with static credentials.
func NewClient(url string, retryer aws.Retryer) *autoscaling.Client {
	cfg := aws.Config{
		Region: "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKIDTEST", SecretAccessKey: "secret", Source: "test"}, nil
		}),
		BaseEndpoint: aws.String(url),
	}
	if retryer == nil {
		retryer = aws.NopRetryer{}
	}
	cfg.Retryer = func() aws.Retryer { return retryer }
	return autoscaling.NewFromConfig(cfg)
}

func (e *env) hook(t *testing.T, hbt time.Duration, def string) asgfake.Action {
	t.Helper()
	_, err := e.client.PutLifecycleHook(context.Background(), &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String("web"), LifecycleHookName: aws.String("drain"),
		LifecycleTransition: aws.String(asgfake.TransitionTerminating),
		HeartbeatTimeout:    aws.Int32(int32(hbt / time.Second)), DefaultResult: aws.String(def),
	})
	if err != nil {
		t.Fatalf("PutLifecycleHook: %v", err)
	}
	acts, err := e.fake.Terminate("i-1")
	if err != nil || len(acts) != 1 {
		t.Fatalf("Terminate = %v, %v; want one action", acts, err)
	}
	return acts[0]
}

func (e *env) heartbeat(token, instance string) error {
	in := &autoscaling.RecordLifecycleActionHeartbeatInput{AutoScalingGroupName: aws.String("web"), LifecycleHookName: aws.String("drain")}
	if token != "" {
		in.LifecycleActionToken = aws.String(token)
	}
	if instance != "" {
		in.InstanceId = aws.String(instance)
	}
	_, err := e.client.RecordLifecycleActionHeartbeat(context.Background(), in)
	return err
}

func (e *env) complete(token, instance, result string) error {
	in := &autoscaling.CompleteLifecycleActionInput{AutoScalingGroupName: aws.String("web"), LifecycleHookName: aws.String("drain"),
		LifecycleActionResult: aws.String(result)}
	if token != "" {
		in.LifecycleActionToken = aws.String(token)
	}
	if instance != "" {
		in.InstanceId = aws.String(instance)
	}
	_, err := e.client.CompleteLifecycleAction(context.Background(), in)
	return err
}

// wantAPIError checks the SDK decoded the error code and a message part.
func wantAPIError(t *testing.T, err error, code, msgPart string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v; want an API error %s", err, code)
	}
	if ae.ErrorCode() != code || !strings.Contains(ae.ErrorMessage(), msgPart) {
		t.Fatalf("error = %s %q; want %s containing %q", ae.ErrorCode(), ae.ErrorMessage(), code, msgPart)
	}
}

func TestHeartbeatExtendsUntilHeartbeatTimeout(t *testing.T) {
	e := newEnv(t, nil)
	act := e.hook(t, 60*time.Second, asgfake.ResultContinue)
	if got := e.fake.InstanceState("i-1"); got != "Terminating:Wait" {
		t.Fatalf("state = %q; want Terminating:Wait", got)
	}
	for range 5 { // 5 × 50s = 250s, far past one heartbeat timeout
		e.clock.Add(50 * time.Second)
		if err := e.heartbeat("", "i-1"); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
	}
	e.clock.Add(59 * time.Second)
	if a, _ := e.fake.Action("i-1"); a.Ended || a.Heartbeats != 5 {
		t.Fatalf("action = %+v; want active with 5 heartbeats", a)
	}
	e.clock.Add(2 * time.Second)
	err := e.heartbeat(act.Token, "")
	wantAPIError(t, err, "ValidationError", "No active Lifecycle Action found with token "+act.Token)
	err = e.heartbeat("", "i-1")
	wantAPIError(t, err, "ValidationError", "No active Lifecycle Action found with instance ID i-1")

	a, _ := e.fake.Action("i-1")
	wantEnd := t0.Add(250*time.Second + 60*time.Second)
	if !a.Ended || a.EndReason != asgfake.EndHeartbeatTimeout || a.Result != asgfake.ResultContinue || !a.EndedAt.Equal(wantEnd) {
		t.Fatalf("action = %+v; want ended by heartbeat_timeout with the DefaultResult CONTINUE at %s", a, wantEnd)
	}
	if got := e.fake.InstanceState("i-1"); got != "Terminating:Proceed" {
		t.Fatalf("state = %q; want Terminating:Proceed", got)
	}
}

func TestGlobalTimeout(t *testing.T) {
	tests := []struct {
		name       string
		hbt        time.Duration
		wantGlobal time.Duration
	}{
		{"100 x heartbeat timeout", 30 * time.Second, 3000 * time.Second},
		{"capped at 48h", 7200 * time.Second, 48 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.hook(t, tt.hbt, asgfake.ResultAbandon)
			out, err := e.client.DescribeLifecycleHooks(context.Background(), &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String("web")})
			if err != nil || len(out.LifecycleHooks) != 1 {
				t.Fatalf("DescribeLifecycleHooks = %+v, %v", out, err)
			}
			h := out.LifecycleHooks[0]
			if aws.ToInt32(h.GlobalTimeout) != int32(tt.wantGlobal/time.Second) || aws.ToInt32(h.HeartbeatTimeout) != int32(tt.hbt/time.Second) ||
				aws.ToString(h.DefaultResult) != asgfake.ResultAbandon || aws.ToString(h.LifecycleHookName) != "drain" {
				t.Fatalf("hook = %+v; want global timeout %s", h, tt.wantGlobal)
			}
			step := tt.hbt / 2
			var err2 error
			for elapsed := time.Duration(0); elapsed < tt.wantGlobal+tt.hbt; elapsed += step {
				e.clock.Add(step)
				if err2 = e.heartbeat("", "i-1"); err2 != nil {
					break
				}
			}
			wantAPIError(t, err2, "ValidationError", "No active Lifecycle Action found")
			a, _ := e.fake.Action("i-1")
			if a.EndReason != asgfake.EndGlobalTimeout || !a.EndedAt.Equal(t0.Add(tt.wantGlobal)) || a.Result != asgfake.ResultAbandon {
				t.Fatalf("action = %+v; want ended by global_timeout at start+%s", a, tt.wantGlobal)
			}
		})
	}
}

func TestCompleteRules(t *testing.T) {
	tests := []struct {
		name      string
		token     func(act asgfake.Action) string
		instance  string
		result    string
		wantCode  string
		wantMsg   string
		wantEnded bool
	}{
		{"by token", func(a asgfake.Action) string { return a.Token }, "", "CONTINUE", "", "", true},
		{"by instance id", func(asgfake.Action) string { return "" }, "i-1", "ABANDON", "", "", true},
		{"token and instance", func(a asgfake.Action) string { return a.Token }, "i-1", "CONTINUE", "", "", true},
		{"wrong token", func(asgfake.Action) string { return "00000000-0000-4000-8000-000000000000" }, "", "CONTINUE",
			"ValidationError", "No active Lifecycle Action found with token", false},
		{"token of another instance", func(a asgfake.Action) string { return a.Token }, "i-2", "CONTINUE",
			"ValidationError", "No active Lifecycle Action found", false},
		{"instance without action", func(asgfake.Action) string { return "" }, "i-2", "CONTINUE",
			"ValidationError", "No active Lifecycle Action found with instance ID i-2", false},
		{"invalid result", func(a asgfake.Action) string { return a.Token }, "", "MAYBE",
			"ValidationError", "Invalid LifecycleActionResult", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			act := e.hook(t, time.Minute, asgfake.ResultAbandon)
			err := e.complete(tt.token(act), tt.instance, tt.result)
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("complete: %v", err)
				}
				// A second completion of the same action is refused.
				err = e.complete(tt.token(act), tt.instance, tt.result)
				wantAPIError(t, err, "ValidationError", "No active Lifecycle Action found")
			} else {
				wantAPIError(t, err, tt.wantCode, tt.wantMsg)
			}
			a, _ := e.fake.Action("i-1")
			if a.Ended != tt.wantEnded {
				t.Fatalf("action ended = %v; want %v (%+v)", a.Ended, tt.wantEnded, a)
			}
			if tt.wantEnded && (a.Result != tt.result || a.EndReason != asgfake.EndCompleted || a.Completions != 1) {
				t.Fatalf("action = %+v; want completed once with %s", a, tt.result)
			}
			if got := e.fake.Count("CompleteLifecycleAction", "ok"); got != btoi(tt.wantEnded) {
				t.Fatalf("successful completions recorded = %d; want %d", got, btoi(tt.wantEnded))
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestDescribeAutoScalingInstances(t *testing.T) {
	e := newEnv(t, nil)
	e.hook(t, time.Minute, asgfake.ResultAbandon)
	out, err := e.client.DescribeAutoScalingInstances(context.Background(), &autoscaling.DescribeAutoScalingInstancesInput{
		InstanceIds: []string{"i-1", "i-404"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.AutoScalingInstances) != 1 {
		t.Fatalf("instances = %+v; want only i-1", out.AutoScalingInstances)
	}
	in := out.AutoScalingInstances[0]
	if aws.ToString(in.InstanceId) != "i-1" || aws.ToString(in.AutoScalingGroupName) != "web" || aws.ToString(in.LifecycleState) != "Terminating:Wait" {
		t.Fatalf("instance = %+v; want i-1 of web in Terminating:Wait", in)
	}
}

func TestTerminateThroughAPINotifies(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.client.PutLifecycleHook(context.Background(), &autoscaling.PutLifecycleHookInput{
		AutoScalingGroupName: aws.String("web"), LifecycleHookName: aws.String("drain"),
		LifecycleTransition:   aws.String(asgfake.TransitionTerminating),
		NotificationTargetARN: aws.String("arn:aws:sqs:us-east-1:123456789012:lifecycle"),
		RoleARN:               aws.String("arn:aws:iam::123456789012:role/asg"),
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.client.TerminateInstanceInAutoScalingGroup(context.Background(), &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String("i-2"), ShouldDecrementDesiredCapacity: aws.Bool(true),
	})
	if err != nil || out.Activity == nil || aws.ToString(out.Activity.AutoScalingGroupName) != "web" {
		t.Fatalf("TerminateInstanceInAutoScalingGroup = %+v, %v", out, err)
	}
	bodies := e.notes.all()
	if len(bodies) != 2 {
		t.Fatalf("notifications = %q; want TEST_NOTIFICATION then the lifecycle action", bodies)
	}
	var test, note map[string]string
	if err := json.Unmarshal([]byte(bodies[0]), &test); err != nil || test["Event"] != "autoscaling:TEST_NOTIFICATION" {
		t.Fatalf("first notification = %s (%v); want TEST_NOTIFICATION", bodies[0], err)
	}
	if err := json.Unmarshal([]byte(bodies[1]), &note); err != nil {
		t.Fatal(err)
	}
	a, _ := e.fake.Action("i-2")
	if note["EC2InstanceId"] != "i-2" || note["LifecycleActionToken"] != a.Token || note["LifecycleTransition"] != asgfake.TransitionTerminating ||
		note["AutoScalingGroupName"] != "web" || note["LifecycleHookName"] != "drain" {
		t.Fatalf("notification = %v; want i-2's action with token %s", note, a.Token)
	}
	// Defaults of the API: 1h heartbeat timeout, ABANDON.
	if !a.Deadline.Equal(t0.Add(time.Hour)) {
		t.Fatalf("deadline = %s; want start + 1h (default HeartbeatTimeout)", a.Deadline)
	}
}

func TestInjectedFaultsAsTheSDKSeesThem(t *testing.T) {
	tests := []struct {
		name          string
		code          string
		wantThrottle  bool
		wantRetryable bool
	}{
		{"throttling", "Throttling", true, true},
		{"internal failure", "InternalFailure", false, true},
		{"unavailable", "ServiceUnavailable", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.hook(t, time.Minute, asgfake.ResultAbandon)
			e.fake.InjectFault(asgfake.Fault{Op: "RecordLifecycleActionHeartbeat", Code: tt.code, Count: 1})
			err := e.heartbeat("", "i-1")
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != tt.code {
				t.Fatalf("err = %v; want %s", err, tt.code)
			}
			if got := retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err); got.Bool() != tt.wantThrottle {
				t.Fatalf("SDK throttle check = %v; want %v", got, tt.wantThrottle)
			}
			if got := retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err); got.Bool() != tt.wantRetryable {
				t.Fatalf("SDK retryable check = %v; want %v", got, tt.wantRetryable)
			}
			if err := e.heartbeat("", "i-1"); err != nil {
				t.Fatalf("heartbeat after the single fault: %v", err)
			}
			if a, _ := e.fake.Action("i-1"); a.Heartbeats != 1 {
				t.Fatalf("heartbeats applied = %d; want 1 (the faulted call must not apply)", a.Heartbeats)
			}
		})
	}
}

func TestStandardRetryerRecoversFromThrottling(t *testing.T) {
	e := newEnv(t, retry.NewStandard(func(o *retry.StandardOptions) { o.MaxBackoff = time.Millisecond }))
	e.hook(t, time.Minute, asgfake.ResultAbandon)
	e.fake.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "Throttling", Count: 2})
	if err := e.complete("", "i-1", "CONTINUE"); err != nil {
		t.Fatalf("complete through 2 throttles: %v", err)
	}
	if got, ok := e.fake.Count("CompleteLifecycleAction", "Throttling"), e.fake.Count("CompleteLifecycleAction", "ok"); got != 2 || ok != 1 {
		t.Fatalf("recorded throttled=%d ok=%d; want 2 and 1", got, ok)
	}
}

func TestFaultAfterApplyLosesTheResponse(t *testing.T) {
	e := newEnv(t, nil)
	e.hook(t, time.Minute, asgfake.ResultAbandon)
	e.fake.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "InternalFailure", Count: 1, AfterApply: true})
	err := e.complete("", "i-1", "CONTINUE")
	wantAPIError(t, err, "InternalFailure", "injected")
	if a, _ := e.fake.Action("i-1"); !a.Ended || a.Result != asgfake.ResultContinue {
		t.Fatalf("action = %+v; want completed despite the error answer", a)
	}
	err = e.complete("", "i-1", "CONTINUE")
	wantAPIError(t, err, "ValidationError", "No active Lifecycle Action found")
	calls := e.fake.Calls()
	last := calls[len(calls)-2]
	if !last.Injected || !last.Applied {
		t.Fatalf("call = %+v; want injected and applied", last)
	}
}

func TestProbabilisticFaultsAreSeeded(t *testing.T) {
	run := func() []string {
		e := newEnv(t, nil)
		e.hook(t, time.Hour, asgfake.ResultAbandon)
		e.fake.InjectFault(asgfake.Fault{Op: "RecordLifecycleActionHeartbeat", Code: "Throttling", Probability: 0.5})
		var got []string
		for range 100 {
			if err := e.heartbeat("", "i-1"); err != nil {
				got = append(got, "T")
			} else {
				got = append(got, ".")
			}
		}
		return got
	}
	a, b := run(), run()
	if strings.Join(a, "") != strings.Join(b, "") {
		t.Fatalf("same seed, different fault sequences:\n%s\n%s", strings.Join(a, ""), strings.Join(b, ""))
	}
	n := strings.Count(strings.Join(a, ""), "T")
	if n < 25 || n > 75 {
		t.Fatalf("%d of 100 calls throttled at p=0.5; want roughly half", n)
	}
}

func TestCallsRecorded(t *testing.T) {
	e := newEnv(t, nil)
	act := e.hook(t, time.Minute, asgfake.ResultAbandon)
	e.clock.Add(10 * time.Second)
	if err := e.heartbeat(act.Token, "i-1"); err != nil {
		t.Fatal(err)
	}
	calls := e.fake.Calls()
	if len(calls) != 2 {
		t.Fatalf("calls = %+v; want PutLifecycleHook and the heartbeat", calls)
	}
	c := calls[1]
	if c.Op != "RecordLifecycleActionHeartbeat" || c.Result != "ok" || c.Status != 200 || !c.At.Equal(t0.Add(10*time.Second)) ||
		c.Params.Get("LifecycleActionToken") != act.Token || c.Params.Get("InstanceId") != "i-1" || c.Params.Get("Version") != "2011-01-01" {
		t.Fatalf("call = %+v", c)
	}
}

func (e *env) launchHook(t *testing.T, hbt time.Duration, def string) {
	t.Helper()
	if err := e.fake.PutHook(asgfake.Hook{Group: "web", Name: "ready", Transition: asgfake.TransitionLaunching,
		HeartbeatTimeout: hbt, DefaultResult: def}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) completeLaunch(instance, result string) error {
	_, err := e.client.CompleteLifecycleAction(context.Background(), &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String("web"), LifecycleHookName: aws.String("ready"),
		InstanceId: aws.String(instance), LifecycleActionResult: aws.String(result)})
	return err
}

// TestLaunchingActionTimeouts: a launching action waits in Pending:Wait,
// heartbeats extend it up to the global timeout, and a timeout applies the
// hook's DefaultResult (ABANDON terminates the instance, CONTINUE puts it in
// service).
func TestLaunchingActionTimeouts(t *testing.T) {
	tests := []struct {
		name      string
		def       string
		beats     int // heartbeats 50 s apart before going silent
		wantEnd   string
		wantAt    time.Duration
		wantState string
	}{
		{"heartbeat timeout abandons", asgfake.ResultAbandon, 0, asgfake.EndHeartbeatTimeout, time.Minute, "Terminating:Proceed"},
		{"heartbeat timeout continues", asgfake.ResultContinue, 2, asgfake.EndHeartbeatTimeout, 160 * time.Second, "InService"},
		{"global timeout", asgfake.ResultContinue, 200, asgfake.EndGlobalTimeout, 100 * time.Minute, "InService"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.launchHook(t, time.Minute, tt.def)
			acts, err := e.fake.Launch("web", "i-9", asgfake.PlaceGroup)
			if err != nil || len(acts) != 1 || acts[0].Transition != asgfake.TransitionLaunching ||
				acts[0].Origin != asgfake.PlaceEC2 || acts[0].Destination != asgfake.PlaceGroup {
				t.Fatalf("Launch = %+v, %v; want one launching action EC2 → AutoScalingGroup", acts, err)
			}
			if got := e.fake.InstanceState("i-9"); got != "Pending:Wait" {
				t.Fatalf("state = %q; want Pending:Wait", got)
			}
			for range tt.beats {
				e.clock.Add(50 * time.Second)
				if err := e.heartbeat2("ready", "i-9"); err != nil {
					break // the global timeout ended it
				}
			}
			e.clock.Add(100 * time.Minute)
			a, _ := e.fake.Action("i-9")
			if !a.Ended || a.EndReason != tt.wantEnd || a.EndedAt.Sub(t0) != tt.wantAt || a.Result != tt.def {
				t.Fatalf("action = %+v; want ended by %s at +%s with %s", a, tt.wantEnd, tt.wantAt, tt.def)
			}
			if got := e.fake.InstanceState("i-9"); got != tt.wantState {
				t.Fatalf("state = %q; want %q", got, tt.wantState)
			}
		})
	}
}

func (e *env) heartbeat2(hook, instance string) error {
	_, err := e.client.RecordLifecycleActionHeartbeat(context.Background(), &autoscaling.RecordLifecycleActionHeartbeatInput{
		AutoScalingGroupName: aws.String("web"), LifecycleHookName: aws.String(hook), InstanceId: aws.String(instance)})
	return err
}

// TestWarmPoolLaunch: an instance launched into the warm pool completes its
// launching action (destination WarmPool) and rests in the pool's state;
// leaving the pool runs the launching hook again (WarmPool →
// AutoScalingGroup); the notices carry Origin and Destination.
func TestWarmPoolLaunch(t *testing.T) {
	e := newEnv(t, nil)
	e.launchHook(t, 5*time.Minute, asgfake.ResultAbandon)
	if err := e.fake.SetWarmPool("web", asgfake.WarmedRunning); err != nil {
		t.Fatal(err)
	}
	acts, err := e.fake.Launch("web", "i-9", asgfake.PlaceWarmPool)
	if err != nil || len(acts) != 1 || acts[0].Destination != asgfake.PlaceWarmPool {
		t.Fatalf("Launch = %+v, %v; want one action into the warm pool", acts, err)
	}
	if got := e.fake.InstanceState("i-9"); got != "Warmed:Pending:Wait" {
		t.Fatalf("state = %q; want Warmed:Pending:Wait", got)
	}
	if err := e.completeLaunch("i-9", asgfake.ResultContinue); err != nil {
		t.Fatal(err)
	}
	if got := e.fake.InstanceState("i-9"); got != asgfake.WarmedRunning {
		t.Fatalf("state = %q; want %s", got, asgfake.WarmedRunning)
	}
	acts, err = e.fake.LeaveWarmPool("i-9")
	if err != nil || len(acts) != 1 || acts[0].Origin != asgfake.PlaceWarmPool || acts[0].Destination != asgfake.PlaceGroup {
		t.Fatalf("LeaveWarmPool = %+v, %v; want one action WarmPool → AutoScalingGroup", acts, err)
	}
	if got := e.fake.InstanceState("i-9"); got != "Pending:Wait" {
		t.Fatalf("state = %q; want Pending:Wait", got)
	}
	if err := e.completeLaunch("i-9", asgfake.ResultContinue); err != nil {
		t.Fatal(err)
	}
	if got := e.fake.InstanceState("i-9"); got != "InService" {
		t.Fatalf("state = %q; want InService", got)
	}
	if err := e.completeLaunch("i-9", asgfake.ResultContinue); err == nil {
		t.Fatal("a third completion succeeded; want No active Lifecycle Action found")
	}

	var got [][2]string
	for _, b := range e.notes.all() {
		var n map[string]string
		if err := json.Unmarshal([]byte(b), &n); err != nil {
			t.Fatal(err)
		}
		if n["LifecycleTransition"] != asgfake.TransitionLaunching || n["EC2InstanceId"] != "i-9" ||
			n["LifecycleHookName"] != "ready" || n["LifecycleActionToken"] == "" {
			t.Fatalf("notice %s; want a launching notice of i-9 for hook ready with a token", b)
		}
		got = append(got, [2]string{n["Origin"], n["Destination"]})
	}
	want := [][2]string{{asgfake.PlaceEC2, asgfake.PlaceWarmPool}, {asgfake.PlaceWarmPool, asgfake.PlaceGroup}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("notices (origin, destination) = %v; want %v", got, want)
	}
}

// TestWarmedInstanceTerminates: a warmed instance scaled in from the pool
// waits in Warmed:Terminating:Wait for its terminating hooks, origin WarmPool.
func TestWarmedInstanceTerminates(t *testing.T) {
	e := newEnv(t, nil)
	if err := e.fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fake.Launch("web", "i-9", asgfake.PlaceWarmPool); err != nil {
		t.Fatal(err)
	}
	if got := e.fake.InstanceState("i-9"); got != asgfake.WarmedStopped {
		t.Fatalf("state = %q; want %s (no launching hook)", got, asgfake.WarmedStopped)
	}
	acts, err := e.fake.Terminate("i-9")
	if err != nil || len(acts) != 1 || acts[0].Origin != asgfake.PlaceWarmPool || acts[0].Destination != asgfake.PlaceEC2 {
		t.Fatalf("Terminate = %+v, %v; want one action WarmPool → EC2", acts, err)
	}
	if got := e.fake.InstanceState("i-9"); got != "Warmed:Terminating:Wait" {
		t.Fatalf("state = %q; want Warmed:Terminating:Wait", got)
	}
	if err := e.complete("", "i-9", asgfake.ResultContinue); err != nil {
		t.Fatal(err)
	}
	if got := e.fake.InstanceState("i-9"); got != "Warmed:Terminating:Proceed" {
		t.Fatalf("state = %q; want Warmed:Terminating:Proceed", got)
	}
}

// TestVisibleAfter: an action is "No active Lifecycle Action found" to the
// API until VisibleAfter has passed since it began.
func TestVisibleAfter(t *testing.T) {
	clock := clock.NewManual(t0)
	fake := asgfake.New(asgfake.Options{Now: clock.Now, VisibleAfter: 5 * time.Second})
	ts := httptest.NewServer(fake)
	defer ts.Close()
	e := &env{clock: clock, fake: fake, client: NewClient(ts.URL, nil), notes: &notes{}}
	fake.AddGroup("web")
	_ = fake.AddInstance("web", "i-1")
	_ = fake.PutHook(asgfake.Hook{Group: "web", Name: "drain"})
	if _, err := fake.Terminate("i-1"); err != nil {
		t.Fatal(err)
	}
	clock.Add(5*time.Second - time.Millisecond)
	wantAPIError(t, e.complete("", "i-1", asgfake.ResultContinue), "ValidationError", "No active Lifecycle Action found")
	clock.Add(time.Millisecond)
	if err := e.complete("", "i-1", asgfake.ResultContinue); err != nil {
		t.Fatalf("complete once visible: %v", err)
	}
}
