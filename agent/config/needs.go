package config

import (
	"fmt"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/lifecycle"
)

// Embedded reports whether cfg runs without AWS and Redis.
func (c Config) Embedded() bool {
	return c.Queue.URL == "" && !c.HasRedis()
}

// HasRedis reports whether cfg names a Redis for state and the limiter.
func (c Config) HasRedis() bool {
	return c.Redis.URL != "" || c.Redis.URLSecret != "" || len(c.Redis.Addrs) > 0
}

func (c Config) NeedsAWS() bool {
	return c.Queue.URL != "" || c.Lifecycle.Has(lifecycle.SourceIMDS) || c.Lifecycle.Has(lifecycle.SourceSQS) ||
		c.Lifecycle.LaunchHookName != "" || c.CloudWatch.Enabled || c.Redis.URLSecret != "" ||
		(c.Report.Enabled && c.Report.Provider == report.ProviderBedrock) || c.Results.S3.Enabled()
}

// NeedsEC2InstanceID reports whether cfg's lifecycle sources match notices
// against this instance's EC2 id (imds, sqs), or a launch hook is completed
// by it (launch_hook_name): without one the agent would never see its own
// termination, or never let its launch go on.
func (c Config) NeedsEC2InstanceID() bool {
	return c.Lifecycle.Has(lifecycle.SourceSQS) || c.Lifecycle.Has(lifecycle.SourceIMDS) || c.Lifecycle.LaunchHookName != ""
}

// NeedsActor reports whether cfg calls Auto Scaling: the imds and sqs
// sources complete terminating actions, launch_hook_name the launching one
// (with the signal source alone too).
func (c Config) NeedsActor() bool {
	return c.Lifecycle.Has(lifecycle.SourceIMDS) || c.Lifecycle.Has(lifecycle.SourceSQS) || c.Lifecycle.LaunchHookName != ""
}

// routesInCatalog reports route tasks naming a diagnostic the catalog
// lacks: every alert the route takes would be rejected at run time.
func (c Config) routesInCatalog() error {
	var p problems
	known := map[string]bool{}
	for _, d := range c.Diagnostics {
		known[d.Name] = true
	}
	for i, r := range c.Routes {
		for j, t := range r.Tasks {
			if t.Diagnostic != "" && !known[t.Diagnostic] {
				p.addf(fmt.Sprintf("[%d].tasks[%d].diagnostic", i, j), "%q is not in the diagnostics catalog", t.Diagnostic)
			}
		}
	}
	return p.err()
}
