package cwpublish

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/limiter"
)

// fakeCloudWatch records the data points put.
type fakeCloudWatch struct {
	mu   sync.Mutex
	puts []*cloudwatch.PutMetricDataInput
}

var _ API = (*fakeCloudWatch)(nil)

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
		p := &Publisher{api: cw, namespace: "autodiag", asg: "web-asg", limiter: lim, clock: clock.Wall{}, log: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.LimiterDegraded(ctx) }()
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
	cfg, err := config.Load(nil, nil)
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

// TestPublisherLimiterDegradedPerInstance: an agent that can never learn
// its Auto Scaling group (no lifecycle.asg_name, no resolver) publishes
// LimiterDegraded with the InstanceId dimension, says so once, and still
// publishes no DrainSeconds (there is no lifecycle action to watch). With a
// resolver the group stays the dimension, so a group that Auto Scaling is
// slow to name does not split the metric across two dimensions.
func TestPublisherLimiterDegradedPerInstance(t *testing.T) {
	t.Parallel()
	const instance = "i-0123456789abcdef0"
	for _, tc := range []struct {
		name    string
		resolve GroupResolver
		want    string // the dimension's name; "" = nothing published
	}{
		{"no way to learn the group", nil, "InstanceId"},
		{"group not resolved yet", func(context.Context) (string, error) { return "", errors.New("throttled") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cw := &fakeCloudWatch{}
				lim := &degradedStub{n: 7}
				logs := &syncBuffer{}
				p := &Publisher{api: cw, namespace: "autodiag", instanceID: instance, resolve: tc.resolve, limiter: lim,
					clock: clock.Wall{}, log: slog.New(slog.NewJSONHandler(logs, nil))}
				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				wg.Go(func() { p.LimiterDegraded(ctx) })
				wg.Go(func() { p.DrainSeconds(ctx, time.Now(), func() string { return "" }) })
				synctest.Wait()
				lim.add(4)
				time.Sleep(publishEvery + time.Second)
				time.Sleep(publishEvery)
				cancel()
				wg.Wait()

				cw.mu.Lock()
				defer cw.mu.Unlock()
				if tc.want == "" {
					if len(cw.puts) != 0 {
						t.Fatalf("%d puts, want none while the group is unknown", len(cw.puts))
					}
					if n := len(logs.lines("LimiterDegraded is published per instance")); n != 0 {
						t.Fatalf("per-instance line logged with a resolver")
					}
					return
				}
				var got []float64
				for _, in := range cw.puts {
					d := in.MetricData[0]
					if aws.ToString(d.MetricName) != MetricLimiterDegraded {
						t.Fatalf("%s published; only LimiterDegraded can be without a group", aws.ToString(d.MetricName))
					}
					if len(d.Dimensions) != 1 || aws.ToString(d.Dimensions[0].Name) != tc.want || aws.ToString(d.Dimensions[0].Value) != instance {
						t.Fatalf("dimensions %+v, want %s=%s", d.Dimensions, tc.want, instance)
					}
					got = append(got, aws.ToFloat64(d.Value))
				}
				if len(got) != 2 || got[0] != 4 || got[1] != 0 {
					t.Fatalf("LimiterDegraded per period = %v, want [4 0]", got)
				}
				if n := len(logs.lines("LimiterDegraded is published per instance")); n != 1 {
					t.Fatalf("%d per-instance lines, want 1", n)
				}
				if lines := logs.lines("CloudWatch metric not published"); len(lines) != 1 || lines[0]["metric"] != MetricDrainSeconds {
					t.Fatalf("warnings %v, want one, for DrainSeconds", lines)
				}
			})
		})
	}
}
