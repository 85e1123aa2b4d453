package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/limiter"
)

// fakeCloudWatch records the data points put.
type fakeCloudWatch struct {
	mu   sync.Mutex
	puts []*cloudwatch.PutMetricDataInput
}

var _ cloudWatchAPI = (*fakeCloudWatch)(nil)

func (f *fakeCloudWatch) PutMetricData(_ context.Context, in *cloudwatch.PutMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts = append(f.puts, in)
	return &cloudwatch.PutMetricDataOutput{}, nil
}

// degradedStub is a limiter whose degraded count the test sets.
type degradedStub struct {
	mu sync.Mutex
	n  float64
}

func (d *degradedStub) DegradedTotal() float64 { d.mu.Lock(); defer d.mu.Unlock(); return d.n }
func (d *degradedStub) add(n float64)          { d.mu.Lock(); d.n += n; d.mu.Unlock() }

// TestPublisherLimiterDegraded: LimiterDegraded is the number of degraded
// decisions of each minute, read from the limiter, with the group as its
// dimension.
func TestPublisherLimiterDegraded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cw := &fakeCloudWatch{}
		lim := &degradedStub{n: 7} // decisions before the publisher started do not count
		p := &publisher{api: cw, namespace: "autodiag", asg: "web-asg", limiter: lim, clock: wallClock{}, log: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.limiterDegraded(ctx) }()
		synctest.Wait() // the publisher has read its starting count
		lim.add(3)
		time.Sleep(publishEvery + time.Second)
		time.Sleep(publishEvery)
		lim.add(2)
		time.Sleep(publishEvery)
		cancel()
		<-done

		var got []float64
		for _, in := range cw.puts {
			d := in.MetricData[0]
			if aws.ToString(d.MetricName) != "LimiterDegraded" || aws.ToString(d.Dimensions[0].Value) != "web-asg" {
				t.Fatalf("datum %+v", d)
			}
			got = append(got, aws.ToFloat64(d.Value))
		}
		want := []float64{3, 0, 2}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("LimiterDegraded per minute = %v, want %v", got, want)
		}
	})
}

// TestLimiterDegradedTotal: the count the publisher reads is the
// limiter's autodiag_limiter_degraded_total.
func TestLimiterDegradedTotal(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens on port 1: every decision takes the fail mode.
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rc.Close()
	reg := prometheus.NewRegistry()
	lim, err := limiter.New(cfg.Limiter.Config, limiter.NewRedis(rc, "t:"), limiter.Options{Registerer: reg, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d, err := lim.Allow(context.Background(), limiter.Request{Host: "web-01", Diagnostic: "uptime"}); err != nil || !d.Degraded {
			t.Fatalf("Allow = %+v, %v; want a degraded decision", d, err)
		}
	}
	if got, want := lim.DegradedTotal(), counterValue(t, reg, "autodiag_limiter_degraded_total"); got != 2 || got != want {
		t.Fatalf("DegradedTotal = %v, metric %v; want 2", got, want)
	}
}

// counterValue gathers the value of an unlabelled counter from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not registered", name)
	return 0
}
