package cwpublish

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/supervisor"
	"github.com/autodiag/autodiag/internal/clock"
)

// API is the part of *cloudwatch.Client the Publisher uses.
type API interface {
	PutMetricData(ctx context.Context, params *cloudwatch.PutMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

var _ API = (*cloudwatch.Client)(nil)

// DegradedCounter is the part of the limiter the Publisher reads.
type DegradedCounter interface{ DegradedTotal() float64 }

// GroupResolver asks Auto Scaling which group this instance is in
// (DescribeAutoScalingInstances).
type GroupResolver func(ctx context.Context) (string, error)

const (
	// publishEvery is the period of both CloudWatch metrics when the
	// Publisher is given none (cloudwatch.interval's default).
	publishEvery = config.DefaultCloudWatchInterval
	// putMetricTimeout bounds one PutMetricData.
	putMetricTimeout = 10 * time.Second
)

// Names of the CloudWatch metrics.
const (
	MetricDrainSeconds    = "DrainSeconds"
	MetricLimiterDegraded = "LimiterDegraded"
)

// Publisher puts the agent's two CloudWatch metrics, with the
// AutoScalingGroupName dimension: DrainSeconds while a drain and its
// completion last, and LimiterDegraded while running. An agent that can
// never know its group (no lifecycle.asg_name, no resolver: the signal
// source alone) publishes LimiterDegraded with the InstanceId dimension
// instead, since a host outside any group degrades like one inside;
// DrainSeconds watches a lifecycle action, which such an agent has none of.
type Publisher struct {
	api       API
	namespace string
	// every is the period of both metrics; zero = publishEvery.
	every time.Duration
	// resolve learns the group when asg is empty; nil = it cannot be.
	resolve GroupResolver
	// instanceID is LimiterDegraded's dimension when the group cannot be
	// known; "" = not published then.
	instanceID string
	limiter    DegradedCounter
	clock      clock.Clock
	log        *slog.Logger

	mu sync.Mutex
	// asg is the group of this instance, "" until known.
	asg string
	// failing holds the metrics whose last publication failed, so a
	// failure is logged once, not every period, until one succeeds again.
	failing map[string]bool
}

// Options are what a Publisher is built from.
type Options struct {
	API       API
	Namespace string
	// ASG is the instance's group when known at start; "" = resolved
	// through Resolve.
	ASG string
	// Every is the period of both metrics; zero = a minute
	// (cloudwatch.interval's default).
	Every time.Duration
	// Resolve learns the group when ASG is empty; nil = it cannot be.
	Resolve GroupResolver
	// InstanceID is LimiterDegraded's dimension when the group cannot be
	// known; "" = not published then.
	InstanceID string
	Limiter    DegradedCounter
	Clock      clock.Clock
	Logger     *slog.Logger
}

// New builds the publisher; LimiterDegraded runs it, and the drain
// supervisor calls DrainSeconds.
func New(o Options) *Publisher {
	return &Publisher{api: o.API, namespace: o.Namespace, asg: o.ASG, every: o.Every, resolve: o.Resolve,
		instanceID: o.InstanceID, limiter: o.Limiter, clock: o.Clock, log: o.Logger}
}

func (p *Publisher) interval() time.Duration {
	if p.every > 0 {
		return p.every
	}
	return publishEvery
}

// Group is the instance's Auto Scaling group, resolved once and cached;
// "" while unknown.
func (p *Publisher) Group(ctx context.Context) string {
	p.mu.Lock()
	asg := p.asg
	p.mu.Unlock()
	if asg != "" || p.resolve == nil {
		return asg
	}
	rctx, cancel := context.WithTimeout(ctx, supervisor.ResolveTimeout)
	defer cancel()
	name, err := p.resolve(rctx)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Debug("resolving the Auto Scaling group for CloudWatch failed", "err", err)
		}
		return ""
	}
	p.mu.Lock()
	p.asg = name
	p.mu.Unlock()
	return name
}

// groupUnknown says why the group is unknown and what to do about it.
func (p *Publisher) groupUnknown() string {
	if p.resolve == nil {
		return "Auto Scaling group unknown: set lifecycle.asg_name (without an imds or sqs source the agent does not ask Auto Scaling)"
	}
	return "Auto Scaling group unknown: DescribeAutoScalingInstances has not answered (asked again each period); set lifecycle.asg_name or check autoscaling:DescribeAutoScalingInstances"
}

// LimiterDegraded puts, every interval, how many limiter decisions were
// taken by a fail mode since the last publication, so an alarm can catch a
// fleet deciding without Redis.
func (p *Publisher) LimiterDegraded(ctx context.Context) {
	last := p.limiter.DegradedTotal()
	// Without a resolver, group is the configured name and asks nobody.
	perInstance := p.resolve == nil && p.instanceID != "" && p.Group(ctx) == ""
	if perInstance {
		p.log.Info("LimiterDegraded is published per instance", "dimension", dimInstanceID, "instance_id", p.instanceID,
			"detail", "no Auto Scaling group is known (lifecycle.asg_name unset, only the signal source); set lifecycle.asg_name for the group's alarm")
	}
	t := time.NewTicker(p.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dim := cwtypes.Dimension{Name: aws.String(dimInstanceID), Value: aws.String(p.instanceID)}
		if !perInstance {
			asg := p.Group(ctx)
			if asg == "" {
				if ctx.Err() == nil {
					p.failed(MetricLimiterDegraded, p.groupUnknown(), nil)
				}
				continue
			}
			dim = groupDimension(asg)
		}
		now := p.limiter.DegradedTotal()
		delta := now - last
		last = now
		p.publish(ctx, MetricLimiterDegraded, cwtypes.StandardUnitCount, delta, dim)
	}
}

// Dimensions of the CloudWatch metrics.
const (
	dimGroup      = "AutoScalingGroupName"
	dimInstanceID = "InstanceId"
)

func groupDimension(asg string) cwtypes.Dimension {
	return cwtypes.Dimension{Name: aws.String(dimGroup), Value: aws.String(asg)}
}

// DrainSeconds puts DrainSeconds at once and every interval until ctx
// ends, so a CloudWatch alarm can catch a drain, or a completion, stuck in
// Terminating:Wait. actionGroup, when it returns a name, is the group of
// the lifecycle action and wins over the instance's.
func (p *Publisher) DrainSeconds(ctx context.Context, start time.Time, actionGroup func() string) {
	t := time.NewTicker(p.interval())
	defer t.Stop()
	// The start is published even when the drain and its completion end
	// before this goroutine runs: every drain leaves a data point.
	pctx := context.WithoutCancel(ctx)
	for {
		asg := actionGroup()
		if asg == "" {
			asg = p.Group(pctx)
		}
		switch {
		case pctx.Err() != nil:
		case asg == "":
			p.failed(MetricDrainSeconds, p.groupUnknown(), nil)
		default:
			p.publish(pctx, MetricDrainSeconds, cwtypes.StandardUnitSeconds, p.clock.Now().Sub(start).Seconds(), groupDimension(asg))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx = ctx
	}
}

// publish puts one datum and logs the first failure of a run of them.
func (p *Publisher) publish(ctx context.Context, name string, unit cwtypes.StandardUnit, value float64, dim cwtypes.Dimension) {
	err := p.put(ctx, name, unit, value, dim)
	switch {
	case err == nil:
		p.mu.Lock()
		was := p.failing[name]
		delete(p.failing, name)
		p.mu.Unlock()
		if was {
			p.log.Info("CloudWatch metric published again", "metric", name)
		}
	case ctx.Err() == nil:
		p.failed(name, "PutMetricData failed", err)
	}
}

// failed logs that a metric could not be published, once until it is
// published again.
func (p *Publisher) failed(name, why string, err error) {
	p.mu.Lock()
	if p.failing == nil {
		p.failing = map[string]bool{}
	}
	was := p.failing[name]
	p.failing[name] = true
	p.mu.Unlock()
	if was {
		return
	}
	attrs := []any{"metric", name, "detail", why + "; logged once until it is published again"}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	p.log.Warn("CloudWatch metric not published", attrs...)
}

// put publishes one datum.
func (p *Publisher) put(ctx context.Context, name string, unit cwtypes.StandardUnit, value float64, dim cwtypes.Dimension) error {
	pctx, cancel := context.WithTimeout(ctx, putMetricTimeout)
	defer cancel()
	_, err := p.api.PutMetricData(pctx, &cloudwatch.PutMetricDataInput{
		Namespace: aws.String(p.namespace),
		MetricData: []cwtypes.MetricDatum{{
			MetricName: aws.String(name),
			Dimensions: []cwtypes.Dimension{dim},
			Unit:       unit,
			Value:      aws.Float64(value),
		}},
	})
	return err
}
