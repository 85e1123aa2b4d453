package lifecycle_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
	"github.com/autodiag/autodiag/lifecycle"
)

// BenchmarkSQSTrigger measures, over real HTTP with the real SDK, the time
// from a lifecycle notification being sent while the watcher long-polls to
// fire being called (ns/op), and reports how long Run took to return after
// fire (sources stopped: no more ReceiveMessage), as stop-ns/op.
func BenchmarkSQSTrigger(b *testing.B) {
	srv, ts := sqsfake.NewTestServer(b)
	client := sqs.NewFromConfig(sqsfake.SDKConfig(ts.URL))
	cfg := lifecycle.DefaultConfig()
	cfg.Sources = []string{lifecycle.SourceSQS}
	var stop time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		url, err := srv.CreateQueue(fmt.Sprintf("lc%d", i), nil)
		if err != nil {
			b.Fatal(err)
		}
		cfg.QueueURL = url
		w, err := lifecycle.NewWatcher(cfg, lifecycle.Deps{SQS: client, InstanceID: "i-1"})
		if err != nil {
			b.Fatal(err)
		}
		fired := make(chan time.Time, 1)
		done := make(chan time.Time, 1)
		go func() {
			_ = w.Run(context.Background(), func(lifecycle.Trigger) { fired <- time.Now() })
			done <- time.Now()
		}()
		for srv.Pollers(fmt.Sprintf("lc%d", i)) == 0 {
			time.Sleep(100 * time.Microsecond) // wait until the long poll is blocked
		}
		body := `{"LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING","AutoScalingGroupName":"web","LifecycleHookName":"drain","LifecycleActionToken":"t","EC2InstanceId":"i-1"}`
		b.StartTimer()
		if _, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
			b.Fatal(err)
		}
		at := <-fired
		b.StopTimer()
		stop += (<-done).Sub(at)
		b.StartTimer()
	}
	b.ReportMetric(float64(stop.Nanoseconds())/float64(b.N), "stop-ns/op")
}

// BenchmarkHeartbeatCall measures one RecordLifecycleActionHeartbeat through
// the real SDK against asgfake over loopback HTTP.
func BenchmarkHeartbeatCall(b *testing.B) {
	fake := asgfake.New(asgfake.Options{})
	fake.AddGroup("web")
	_ = fake.AddInstance("web", "i-1")
	_ = fake.PutHook(asgfake.Hook{Group: "web", Name: "drain", HeartbeatTimeout: time.Hour})
	if _, err := fake.Terminate("i-1"); err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(fake)
	defer ts.Close()
	client := autoscaling.NewFromConfig(sqsfake.SDKConfig(ts.URL))
	in := &autoscaling.RecordLifecycleActionHeartbeatInput{AutoScalingGroupName: aws.String("web"),
		LifecycleHookName: aws.String("drain"), InstanceId: aws.String("i-1")}
	b.ResetTimer()
	for range b.N {
		if _, err := client.RecordLifecycleActionHeartbeat(context.Background(), in); err != nil {
			b.Fatal(err)
		}
	}
}
