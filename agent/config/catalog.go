package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"

	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/task"
)

// CompileCatalog compiles the task validator (the host allow-list, the IP
// literal opt-in, the catalog, queue.max_age) and the runnable catalog.
func (cfg Config) CompileCatalog() (*task.Validator, map[string]runner.Diagnostic, error) {
	v := &task.Validator{Catalog: map[string]task.Spec{}, MaxAge: cfg.Queue.MaxAge, AllowIPLiterals: cfg.Limiter.Hosts.AllowIPLiterals}
	for _, p := range cfg.Limiter.Hosts.Allow {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, nil, fmt.Errorf("config: limiter.hosts.allow: %w", err)
		}
		v.Allow = append(v.Allow, re)
	}
	catalog := map[string]runner.Diagnostic{}
	for _, diag := range cfg.Diagnostics {
		diag = diag.WithDefaults()
		catalog[diag.Name] = diag
		spec := task.Spec{Params: map[string]*regexp.Regexp{}, Required: diag.Placeholders(), AnyCharset: map[string]bool{}}
		for name, pat := range diag.Params {
			spec.AnyCharset[name] = diag.AnyCharset(name)
			re, err := task.FullMatch(pat)
			if err != nil {
				return nil, nil, fmt.Errorf("config: diagnostics %s params.%s: %w", diag.Name, name, err)
			}
			spec.Params[name] = re
		}
		v.Catalog[diag.Name] = spec
	}
	return v, catalog, nil
}

// Validator is the task validator of CompileCatalog, so that a dry run and the
// standalone alert listener judge a host exactly as the agent does.
func (cfg Config) Validator() (*task.Validator, error) {
	v, _, err := cfg.CompileCatalog()
	return v, err
}

// Warnings are what config validate prints without failing: each
// parameter whose catalog entry lifts the default character set, since
// its values then reach the program with whatever the pattern lets
// through (spaces, quotes, shell and option syntax); and each tool of
// investigations that needs approval for longer than an investigation
// waits, since the investigation then gives up on it first.
func (c Config) Warnings() []string {
	var out []string
	for i, d := range c.Diagnostics {
		if ic := c.Report.Investigate; ic != nil && c.Report.Enabled && d.Investigate && d.Approval == runner.ApprovalRequired {
			if wait, wall := d.WithDefaults().ApprovalTimeout, ic.WithDefaults().WallTime; wait > wall {
				out = append(out, fmt.Sprintf("diagnostics[%d].approval_timeout: %s of %s is longer than report.investigate.wall_time %s: "+
					"an investigation stops waiting for its approval first, and the call is a Gap awaiting_approval (approval_pending)", i, wait, d.Name, wall))
			}
		}
		prog := "the program"
		if len(d.Command) > 0 {
			prog = d.Command[0]
		}
		for _, name := range slices.Sorted(maps.Keys(d.Charset)) {
			if d.AnyCharset(name) {
				out = append(out, fmt.Sprintf("diagnostics[%d].charset.%s: any: values of {param.%s} of %s may hold any character its pattern allows, not only %s; "+
					"make sure %s reads them as data", i, name, name, d.Name, task.ParamCharset, prog))
			}
		}
	}
	return out
}
