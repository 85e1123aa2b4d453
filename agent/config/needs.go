package config

import (
	"fmt"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
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
	for i, r := range c.Routes {
		for j, t := range r.Tasks {
			if t.Diagnostic != "" {
				if err := inCatalog(c.Diagnostics, t.Diagnostic); err != nil {
					p.add(fmt.Sprintf("[%d].tasks[%d].diagnostic", i, j), err)
				}
			}
		}
	}
	return p.err()
}

// rulesInCatalog checks that every diagnostic a limiter rule matches is in
// the catalog: a typo there would make the rule match nothing, silently.
// Keys are relative to the limiter section.
func rulesInCatalog(rules []limiter.Rule, catalog []runner.Diagnostic) error {
	var p problems
	for i, r := range rules {
		for j, d := range r.Match.Diagnostic {
			if err := inCatalog(catalog, d); err != nil {
				p.add(fmt.Sprintf("rules[%d].match.diagnostic[%d]", i, j), err)
			}
		}
	}
	return p.err()
}

// inCatalog is nil when the catalog has a diagnostic of that name, else
// the problem, with the nearest name when one is near enough to be the
// one meant.
func inCatalog(catalog []runner.Diagnostic, name string) error {
	names := make([]string, 0, len(catalog))
	for _, d := range catalog {
		if d.Name == name {
			return nil
		}
		names = append(names, d.Name)
	}
	if best, ok := nearest(name, names); ok {
		return fmt.Errorf("%q is not in the diagnostics catalog; did you mean %q?", name, best)
	}
	return fmt.Errorf("%q is not in the diagnostics catalog", name)
}
