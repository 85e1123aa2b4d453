package cwpublish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"

	"github.com/autodiag/autodiag/internal/clock"
)

// flakyCloudWatch fails PutMetricData while failing is set.
type flakyCloudWatch struct {
	mu      sync.Mutex
	failing bool
	names   []string  // metric names accepted
	values  []float64 // their values
}

var _ API = (*flakyCloudWatch)(nil)

func (f *flakyCloudWatch) PutMetricData(_ context.Context, in *cloudwatch.PutMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		return nil, errors.New("api error Throttling: Rate exceeded")
	}
	f.names = append(f.names, aws.ToString(in.MetricData[0].MetricName))
	f.values = append(f.values, aws.ToFloat64(in.MetricData[0].Value))
	return &cloudwatch.PutMetricDataOutput{}, nil
}

func (f *flakyCloudWatch) set(failing bool) { f.mu.Lock(); f.failing = failing; f.mu.Unlock() }

func (f *flakyCloudWatch) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, m := range f.names {
		if m == name {
			n++
		}
	}
	return n
}

// TestPublisherLogsOnce: a metric that cannot be published is logged once,
// not every period, until it is published again; an unknown group is
// resolved through Auto Scaling and then used.
func TestPublisherLogsOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const every = time.Second
		cw := &flakyCloudWatch{failing: true}
		logs := &syncBuffer{}
		var resolves atomic.Int32
		p := &Publisher{api: cw, namespace: "autodiag", every: every, limiter: &degradedStub{}, clock: clock.Wall{},
			log: slog.New(slog.NewJSONHandler(logs, nil)),
			resolve: func(context.Context) (string, error) {
				if resolves.Add(1) < 3 {
					return "", errors.New("throttled")
				}
				return "web-asg", nil
			}}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { p.DrainSeconds(ctx, time.Now(), func() string { return "" }) })
		wg.Go(func() { p.LimiterDegraded(ctx) })

		time.Sleep(5*every + every/2) // the group is known from the 3rd look; puts fail
		synctest.Wait()
		if n := len(logs.lines("CloudWatch metric not published")); n != 2 {
			t.Fatalf("%d warnings over 5 failing periods of two metrics, want one per metric", n)
		}
		cw.set(false)
		time.Sleep(every)
		synctest.Wait()
		if n := len(logs.lines("CloudWatch metric published again")); n != 2 {
			t.Fatalf("%d recoveries logged, want one per metric", n)
		}
		if cw.count(MetricDrainSeconds) == 0 || cw.count(MetricLimiterDegraded) == 0 {
			t.Fatalf("accepted %v, want both metrics", cw.names)
		}
		cw.set(true)
		time.Sleep(every)
		synctest.Wait()
		cancel()
		wg.Wait()
		if n := len(logs.lines("CloudWatch metric not published")); n != 4 {
			t.Fatalf("%d warnings after failing again, want two more", n)
		}
	})
}

// TestPublisherGroupUnknownLogsOnce: without a group and without a way to
// learn it, neither metric is published and each says so once.
func TestPublisherGroupUnknownLogsOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cw := &flakyCloudWatch{}
		logs := &syncBuffer{}
		p := &Publisher{api: cw, namespace: "autodiag", every: time.Second, limiter: &degradedStub{}, clock: clock.Wall{},
			log: slog.New(slog.NewJSONHandler(logs, nil))}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { p.DrainSeconds(ctx, time.Now(), func() string { return "" }) })
		wg.Go(func() { p.LimiterDegraded(ctx) })
		time.Sleep(5 * time.Second)
		cancel()
		wg.Wait()
		lines := logs.lines("CloudWatch metric not published")
		if len(lines) != 2 || len(cw.names) != 0 {
			t.Fatalf("%d warnings, %d puts; want one warning per metric and no put", len(lines), len(cw.names))
		}
		if d, _ := lines[0]["detail"].(string); !strings.Contains(d, "lifecycle.asg_name") {
			t.Errorf("warning %v does not say how to set the group", lines[0])
		}
	})
}

// syncBuffer is a log sink the publisher's goroutine writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the JSON log lines whose msg is msg.
func (s *syncBuffer) lines(msg string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(s.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
