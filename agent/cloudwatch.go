package agent

import (
	"context"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"

	"github.com/autodiag/autodiag/lifecycle"
)

// cloudWatchAPI is the part of *cloudwatch.Client the agent uses.
type cloudWatchAPI interface {
	PutMetricData(ctx context.Context, params *cloudwatch.PutMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

var _ cloudWatchAPI = (*cloudwatch.Client)(nil)

// degradedCounter is the part of the limiter the publisher reads.
type degradedCounter interface{ DegradedTotal() float64 }

const (
	// publishEvery is the period of both CloudWatch metrics.
	publishEvery = time.Minute
	// putMetricTimeout bounds one PutMetricData.
	putMetricTimeout = 10 * time.Second
)

// publisher puts the agent's two CloudWatch metrics, with the
// AutoScalingGroupName dimension: DrainSeconds while draining and
// LimiterDegraded while running.
type publisher struct {
	api       cloudWatchAPI
	namespace string
	// asg is the group of this instance, "" when unknown.
	asg     string
	limiter degradedCounter
	clock   Clock
	log     *slog.Logger
}

// limiterDegraded puts, every minute, how many limiter decisions were
// taken by a fail mode since the last publication, so an alarm can catch a
// fleet deciding without Redis.
func (p *publisher) limiterDegraded(ctx context.Context) {
	if p.asg == "" {
		return
	}
	last := p.limiter.DegradedTotal()
	t := time.NewTicker(publishEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := p.limiter.DegradedTotal()
		delta := now - last
		last = now
		if err := p.put(ctx, "LimiterDegraded", cwtypes.StandardUnitCount, delta, p.asg); err != nil && ctx.Err() == nil {
			p.log.Warn("publishing LimiterDegraded failed", "err", err)
		}
	}
}

// drainSeconds puts DrainSeconds every minute until ctx ends, so a
// CloudWatch alarm can catch a drain stuck in Terminating:Wait. The
// action's group wins over the configured one.
func (p *publisher) drainSeconds(ctx context.Context, start time.Time, action *lifecycle.Action) {
	asg := p.asg
	if action != nil && action.ASGName != "" {
		asg = action.ASGName
	}
	if asg == "" {
		p.log.Warn("DrainSeconds not published: Auto Scaling group unknown (set lifecycle.asg_name)")
		return
	}
	t := time.NewTicker(publishEvery)
	defer t.Stop()
	for {
		err := p.put(ctx, "DrainSeconds", cwtypes.StandardUnitSeconds, p.clock.Now().Sub(start).Seconds(), asg)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("publishing DrainSeconds failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// put publishes one datum.
func (p *publisher) put(ctx context.Context, name string, unit cwtypes.StandardUnit, value float64, asg string) error {
	pctx, cancel := context.WithTimeout(ctx, putMetricTimeout)
	defer cancel()
	_, err := p.api.PutMetricData(pctx, &cloudwatch.PutMetricDataInput{
		Namespace: aws.String(p.namespace),
		MetricData: []cwtypes.MetricDatum{{
			MetricName: aws.String(name),
			Dimensions: []cwtypes.Dimension{{Name: aws.String("AutoScalingGroupName"), Value: aws.String(asg)}},
			Unit:       unit,
			Value:      aws.Float64(value),
		}},
	})
	return err
}
