package agent

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
)

// publishLimiterDegraded puts, every minute, how many limiter decisions
// were taken by a fail mode since the last publication (CloudWatch metric
// LimiterDegraded), so an alarm can catch a fleet deciding without Redis.
func (a *Agent) publishLimiterDegraded(ctx context.Context) {
	asg := a.d.ASGName
	if asg == "" {
		asg = a.cfg.Lifecycle.ASGName
	}
	if asg == "" {
		return
	}
	last := a.degradedTotal()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := a.degradedTotal()
		delta := now - last
		last = now
		err := a.putMetric(ctx, "LimiterDegraded", cwtypes.StandardUnitCount, delta, asg)
		if err != nil && ctx.Err() == nil {
			a.log.Warn("publishing LimiterDegraded failed", "err", err)
		}
	}
}

// putMetric publishes one datum of the agent's namespace with the
// AutoScalingGroupName dimension.
func (a *Agent) putMetric(ctx context.Context, name string, unit cwtypes.StandardUnit, value float64, asg string) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := a.d.CloudWatch.PutMetricData(pctx, &cloudwatch.PutMetricDataInput{
		Namespace: aws.String(a.cfg.CloudWatch.Namespace),
		MetricData: []cwtypes.MetricDatum{{
			MetricName: aws.String(name),
			Dimensions: []cwtypes.Dimension{{Name: aws.String("AutoScalingGroupName"), Value: aws.String(asg)}},
			Unit:       unit,
			Value:      aws.Float64(value),
		}},
	})
	return err
}

// degradedTotal reads autodiag_limiter_degraded_total from the registry.
func (a *Agent) degradedTotal() float64 {
	mfs, err := a.d.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != "autodiag_limiter_degraded_total" {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		return sum
	}
	return 0
}
