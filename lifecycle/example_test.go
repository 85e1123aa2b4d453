package lifecycle_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/lifecycle"
)

// The agent's side of a drain: heartbeat the lifecycle action while work
// remains, stop exactly when the drain ends, then complete it once on a
// detached, bounded context. Here Auto Scaling is asgfake behind the real
// SDK client.
func Example() {
	fake := asgfake.New(asgfake.Options{Seed: 1})
	fake.AddGroup("web")
	_ = fake.AddInstance("web", "i-0abc")
	_ = fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: 5 * time.Minute})
	_, _ = fake.Terminate("i-0abc") // scale-in: the instance enters Terminating:Wait
	ts := httptest.NewServer(fake)
	defer ts.Close()
	client := autoscaling.NewFromConfig(aws.Config{
		Region: "us-east-1", BaseEndpoint: aws.String(ts.URL),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret"}, nil
		}),
	})

	cfg := lifecycle.DefaultConfig()
	cfg.HookName = "drain"
	cfg.HookHeartbeatTimeout = 5 * time.Minute
	actor := lifecycle.NewActor(cfg, lifecycle.Deps{AutoScaling: client, InstanceID: "i-0abc"})

	// What the imds source reports (no token: completed by instance id); the
	// ASG name is looked up with DescribeAutoScalingInstances.
	act := lifecycle.Action{InstanceID: "i-0abc", HookName: "drain"}
	drainCtx, drainDone := context.WithCancel(context.Background())
	heartbeats := make(chan error)
	go func() { heartbeats <- actor.Heartbeat(drainCtx, act) }()
	for actor.Status().Heartbeats == 0 { // the first heartbeat is sent at once
		time.Sleep(time.Millisecond)
	}
	drainDone() // the drain ended: heartbeats stop now
	fmt.Println("heartbeat loop:", <-heartbeats)

	ctx, cancel := context.WithTimeout(context.WithoutCancel(drainCtx), time.Minute)
	defer cancel()
	fmt.Println("complete:", actor.Complete(ctx, act, cfg.CompletionResult(false)))
	fmt.Println("again:", actor.Complete(ctx, act, lifecycle.ResultContinue))

	a, _ := fake.Action("i-0abc")
	fmt.Println(a.EndReason, a.Result, "completions:", a.Completions, "state:", fake.InstanceState("i-0abc"))

	// The action is JSON the agent can persist to resume after a restart.
	b, _ := json.Marshal(lifecycle.Action{InstanceID: "i-0abc", ASGName: "web", HookName: "drain"})
	fmt.Println(string(b))
	// Output:
	// heartbeat loop: <nil>
	// complete: <nil>
	// again: <nil>
	// completed CONTINUE completions: 1 state: Terminating:Proceed
	// {"InstanceID":"i-0abc","ASGName":"web","HookName":"drain"}
}
