package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/cwpublish"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/supervisor"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
)

// flakyCloudWatch fails PutMetricData while failing is set.
type flakyCloudWatch struct {
	mu      sync.Mutex
	failing bool
	names   []string  // metric names accepted
	values  []float64 // their values
}

var _ cwpublish.API = (*flakyCloudWatch)(nil)

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

// TestPersistedDrainDiscardedWhenInService: a drain the previous process
// persisted is not resumed when instance metadata says InService: the
// agent logs it, marks the record done and keeps taking work.
func TestPersistedDrainDiscardedWhenInService(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load([]byte(testConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg.HostNames = append(cfg.HostNames, agentTestHosts...)
	a, closeFn, err := Open(context.Background(), cfg, OpenOptions{Hostname: endingInstance, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	lc := cfg.Lifecycle
	lc.Sources = []string{lifecycle.SourceSignal, lifecycle.SourceIMDS}
	lc.HookName = endingHook
	w, err := lifecycle.NewWatcher(lc, lifecycle.Deps{IMDS: stateIMDS{state: "InService"}, InstanceID: endingInstance})
	if err != nil {
		t.Fatal(err)
	}
	a.sup = a.newSupervisor(w, a.d.Actor)
	ctx := context.Background()
	start := time.Now().Add(-time.Minute)
	if err := a.d.Store.SaveDrain(ctx, endingInstance, state.DrainRecord{Source: "admin", Reason: "POST /v1/drain",
		StartedAt: start, Deadline: start.Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-a.Started()
	if st := a.Status().State; st != "running" {
		t.Fatalf("state %q after start, want running: the persisted drain was resumed", st)
	}
	if n := len(logs.lines("persisted drain discarded")); n != 1 {
		t.Fatalf("%d discard lines, want 1", n)
	}
	if rec, _ := a.d.Store.LoadDrain(ctx, endingInstance); rec == nil || !rec.Completed {
		t.Fatalf("persisted drain %+v, want marked done so no later start resumes it", rec)
	}
	a.Drain("admin", "end of test")
	if err := <-done; err != nil || a.Ending() != supervisor.EndingDrained {
		t.Fatalf("Run = %v, ending %s", err, a.Ending())
	}
}

// TestDepsResolveASG: without lifecycle.asg_name and without an Actor (the
// signal source alone), the group comes from Deps.ResolveASG.
func TestDepsResolveASG(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load([]byte(testConfig+"cloudwatch: {enabled: true}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := limiter.New(limiter.DefaultConfig(), limiter.NewMemory(), limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Deps{Source: queue.NewMemory(queue.MemoryOptions{}), Store: state.NewMemory(state.MemoryOptions{}),
		Limiter: lim, CloudWatch: &flakyCloudWatch{}, InstanceID: endingInstance,
		ResolveASG: func(context.Context) (string, error) { return "from-describe", nil }})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.publisher.Group(context.Background()); got != "from-describe" {
		t.Fatalf("group %q, want the resolver's", got)
	}
}

// TestResumedDrainSecondsCountsFromFirstStart: a drain resumed after a
// restart publishes DrainSeconds from when the previous process started
// it, so restarts of an agent whose completion keeps failing do not reset
// what the stuck-drain alarm reads.
func TestResumedDrainSecondsCountsFromFirstStart(t *testing.T) {
	t.Parallel()
	cfg, err := config.Load([]byte(testConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HostNames = append(cfg.HostNames, agentTestHosts...)
	a, closeFn, err := Open(context.Background(), cfg, OpenOptions{Hostname: endingInstance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	cw := &flakyCloudWatch{}
	a.publisher = cwpublish.New(cwpublish.Options{API: cw, Namespace: "autodiag", ASG: endingASG, Limiter: noDegraded{}, Clock: clock.Wall{},
		Logger: slog.New(slog.DiscardHandler)})
	a.sup = a.newSupervisor(a.d.Watcher, a.d.Actor)
	ctx := context.Background()
	const ago = 5 * time.Minute
	first := time.Now().Add(-ago)
	if err := a.d.Store.SaveDrain(ctx, endingInstance, state.DrainRecord{Source: "admin", Reason: "POST /v1/drain",
		StartedAt: first, Deadline: first.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	if len(cw.values) == 0 || cw.names[0] != cwpublish.MetricDrainSeconds || cw.values[0] < ago.Seconds() {
		t.Fatalf("published %v %v, want DrainSeconds of at least %.0f", cw.names, cw.values, ago.Seconds())
	}
	if rec, _ := a.d.Store.LoadDrain(ctx, endingInstance); rec == nil || !rec.StartedAt.Equal(first) {
		t.Fatalf("persisted drain %+v, want its first start kept", rec)
	}
}

// stateIMDS answers target-lifecycle-state with state and 404 elsewhere.
type stateIMDS struct{ state string }

type notFound struct{}

func (notFound) Error() string       { return "404 Not Found" }
func (notFound) HTTPStatusCode() int { return 404 }

func (s stateIMDS) GetMetadata(_ context.Context, in *imds.GetMetadataInput, _ ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	if in.Path != "autoscaling/target-lifecycle-state" {
		return nil, notFound{}
	}
	return &imds.GetMetadataOutput{Content: io.NopCloser(strings.NewReader(s.state))}, nil
}

// noDegraded is a limiter that never decided in a fail mode.
type noDegraded struct{}

func (noDegraded) DegradedTotal() float64 { return 0 }
