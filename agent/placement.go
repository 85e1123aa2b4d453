package agent

import (
	"github.com/autodiag/autodiag/agent/config"

	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/limiter"
)

// placementTimeout bounds each lookup of the instance's group or zone at
// start.
const placementTimeout = 2 * time.Second

// placement is where the instance sits, for limiter max_percent caps per
// asg or az and the in-service indexes they count.
type placement struct{ asg, az string }

// findPlacement learns what the configured max_percent scopes need: the
// Auto Scaling group (lifecycle.asg_name, else DescribeAutoScalingInstances)
// and the availability zone (IMDS placement/availability-zone). What cannot
// be learnt stays empty, with a warning: those caps then count under an
// unnamed group or zone.
func findPlacement(ctx context.Context, cfg config.Config, awsCfg *aws.Config, instanceID string, log *slog.Logger) placement {
	p := placement{asg: cfg.Lifecycle.ASGName}
	scopes := cfg.Limiter.UsesPercent()
	if slices.Contains(scopes, limiter.PerASG) && p.asg == "" && awsCfg != nil {
		cctx, cancel := context.WithTimeout(ctx, placementTimeout)
		out, err := autoscaling.NewFromConfig(*awsCfg).DescribeAutoScalingInstances(cctx,
			&autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{instanceID}})
		cancel()
		if err == nil && len(out.AutoScalingInstances) > 0 {
			p.asg = aws.ToString(out.AutoScalingInstances[0].AutoScalingGroupName)
		} else if err != nil {
			log.Warn("could not learn the Auto Scaling group for max_percent per asg", "err", err)
		}
	}
	if slices.Contains(scopes, limiter.PerAZ) && awsCfg != nil {
		cctx, cancel := context.WithTimeout(ctx, placementTimeout)
		out, err := imds.NewFromConfig(*awsCfg).GetMetadata(cctx, &imds.GetMetadataInput{Path: "placement/availability-zone"})
		if err == nil {
			b, rerr := io.ReadAll(io.LimitReader(out.Content, 64))
			_ = out.Content.Close()
			p.az, err = strings.TrimSpace(string(b)), rerr
		}
		cancel()
		if err != nil {
			log.Warn("could not learn the availability zone for max_percent per az", "err", err)
		}
	}
	for _, s := range scopes {
		if (s == limiter.PerASG && p.asg == "") || (s == limiter.PerAZ && p.az == "") {
			log.Warn("max_percent per "+s+" counts this agent under an unnamed "+s+": set lifecycle.asg_name, or give the instance role autoscaling:DescribeAutoScalingInstances and IMDS access", "per", s)
		}
	}
	return p
}

// inServiceKeys names the in-service indexes an instance is counted in,
// one per max_percent scope the configuration uses; nil when none.
func inServiceKeys(prefix string, scopes []string) func(state.Instance) []string {
	if len(scopes) == 0 {
		return nil
	}
	return func(inst state.Instance) []string {
		keys := make([]string, 0, len(scopes))
		for _, s := range scopes {
			value := ""
			switch s {
			case limiter.PerASG:
				value = inst.ASG
			case limiter.PerAZ:
				value = inst.AZ
			}
			keys = append(keys, limiter.InServiceKey(prefix, s, value))
		}
		return keys
	}
}
