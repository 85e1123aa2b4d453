package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/redact"
	rootcause "github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
)

// errReportNotOK ends `autodiag report` with exit 1 when the report is not
// ok (failed, rate_limited, skipped): it is printed all the same.
var errReportNotOK = errors.New("report not written")

func (c *cli) reportCmd() *cobra.Command {
	var (
		force  bool
		asJSON bool
		addr   string
	)
	cmd := &cobra.Command{
		Use:   "report ID",
		Short: "(Re)generate one task's root-cause report now, through the report limits, store it with Redis and print it",
		Long: "(Re)generate one task's root-cause report now, through the report limits, and print it.\n\n" +
			"With Redis the report is stored in the task record and the report notification event is written to the\n" +
			"outbox for the configured sinks; the running agents deliver it: this needs the agents' --config and the\n" +
			"model's key here. Without Redis (embedded mode) the local agent writes it (POST /v1/tasks/{id}/report) with\n" +
			"its own report section and key, through its own report limits, stored in its record, sent as its event; then\n" +
			"no --config is needed beyond the agent's admin_addr and admin_auth (or --admin-addr).",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			// The model's own bound, and the store's on either side.
			ctx, cancel := context.WithTimeout(cmd.Context(), cfg.Report.Timeout+2*cliTimeout)
			defer cancel()
			res, err := c.runReport(ctx, cfg, addr, args[0], force)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(jsonOut(c.stdout, false))
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				printReport(c, res)
			}
			if res.Status != rootcause.StatusOK {
				return fmt.Errorf("%w: %s: %s", errReportNotOK, res.Status, res.Reason)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "skip the report cooldown (min_interval), not the daily cap")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as the task record holds it")
	cmd.Flags().StringVar(&addr, "admin-addr", "", "local agent admin address when no Redis is configured (default: admin_addr of the config)")
	return cmd
}

// runReport writes the report of one task: the record from Redis (then
// the report is stored in it and its `report` event written to the
// notification outbox, which the agents deliver) or, without Redis, from
// the local agent's admin API (then it is only printed: the record and
// the outbox live in that agent).
func (c *cli) runReport(ctx context.Context, cfg config.Config, addr, id string, force bool) (rootcause.Result, error) {
	rc, err := open.RedisClient(cfg.Redis, 0)
	if err != nil {
		return rootcause.Result{}, usageError{err}
	}
	if rc == nil {
		// Embedded mode: the record, the outbox, the report limiter and
		// the model's key live in the running agent; it writes the report
		// through its own configuration, cooldown and cap, and answers
		// report_disabled when it has no report section. Neither this
		// command's config nor its environment needs them.
		return askAgentReport(ctx, cfg, addr, id, force)
	}
	defer rc.Close()
	if !cfg.Report.Enabled {
		return rootcause.Result{}, usageError{errors.New("report: report.enabled is false in the configuration; nothing is sent")}
	}
	if err := cfg.Report.CheckEnv(os.LookupEnv); err != nil {
		return rootcause.Result{}, usageError{fmt.Errorf("invalid configuration: report.%w", err)}
	}
	store := state.NewRedis(rc, state.RedisOptions{Prefix: cfg.Redis.Prefix, AuditShards: cfg.Redis.AuditShards, InstanceShards: cfg.Redis.InstanceShards})
	sctx, cancel := context.WithTimeout(ctx, cliTimeout)
	rec, ok, err := store.Task(sctx, id)
	cancel()
	if err != nil {
		return rootcause.Result{}, fmt.Errorf("report: %w", err)
	}
	if !ok {
		return rootcause.Result{}, fmt.Errorf("report: task %s: %w", id, errNotFound)
	}
	if rec.Status != state.StatusDone || rec.Outcome == "" {
		return rootcause.Result{}, usageError{fmt.Errorf("report: task %s has not ended (status %s)", id, rec.Status)}
	}
	var awsCfg aws.Config
	if cfg.Report.Provider == rootcause.ProviderBedrock {
		if awsCfg, err = awsconfig.LoadDefaultConfig(ctx); err != nil {
			return rootcause.Result{}, fmt.Errorf("report: aws config: %w", err)
		}
	}
	var keyRefs []string
	if cfg.Report.APIKeySecret != "" {
		keyRefs = []string{cfg.Report.APIKeySecret}
	}
	lookup, err := cliLookup(ctx, cfg, keyRefs)
	if err != nil {
		return rootcause.Result{}, fmt.Errorf("report: %w", err)
	}
	parts, err := hooks.OpenReportParts(cfg, awsCfg, rc, lookup)
	if err != nil {
		return rootcause.Result{}, err
	}
	red, err := redact.New(cfg.Results.Redact.Effective(), nil)
	if err != nil {
		return rootcause.Result{}, usageError{fmt.Errorf("results.redact: %w", err)}
	}
	red.SetKnown(cfg.KnownValues(lookup))
	log := newLogger(c.stderr, cfg.LogLevel)
	host, _ := os.Hostname()
	consumer := "cli-" + host
	ob := notify.NewRedisOutbox(rc, notify.RedisOptions{Prefix: cfg.Redis.Prefix})
	// A report of a task whose alert resolved gets resolved_at, as the
	// agents' do; its metrics are the agents' to count.
	resolutions, err := resolution.NewRecorder(resolution.NewRedis(rc, cfg.Redis.Prefix), store, nil, nil, cfg.Redis.Timeout,
		log.With("component", "resolution"), prometheus.NewRegistry())
	if err != nil {
		return rootcause.Result{}, err
	}
	sink, err := hooks.OutboxReportSink(cfg, store, ob, consumer, log, resolutions.ReportWritten)
	if err != nil {
		return rootcause.Result{}, err
	}
	r, err := hooks.NewReporter(cfg, parts, sink, red, consumer, nil, log)
	if err != nil {
		return rootcause.Result{}, err
	}
	var diag *runner.Diagnostic
	for i := range cfg.Diagnostics {
		if cfg.Diagnostics[i].Name == rec.Diagnostic {
			diag = &cfg.Diagnostics[i]
		}
	}
	ev := hooks.EvidenceOf(rec, diag)
	// The output is redacted again: the configuration may redact more
	// now than when the task ran.
	ev.Output = red.RedactString(ev.Output)
	job := rootcause.Job{ID: rec.ID, Evidence: ev, Force: force}
	res := r.Process(ctx, job)
	sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), cliTimeout)
	defer cancel()
	if err := sink(sctx, job, res); err != nil {
		return res, fmt.Errorf("report: written but not stored: %w", err)
	}
	return res, nil
}

// askAgentReport has the local agent write the report
// (POST /v1/tasks/{id}/report): through its report limits, stored in its
// record and sent as its `report` event.
func askAgentReport(ctx context.Context, cfg config.Config, addr, id string, force bool) (rootcause.Result, error) {
	target, err := newAdminTarget(ctx, cfg, addr)
	if err != nil {
		return rootcause.Result{}, err
	}
	path := "/v1/tasks/" + url.PathEscape(id) + "/report"
	if force {
		path += "?force=true"
	}
	b, err := adminCallTimeout(ctx, http.MethodPost, target, path, cfg.Report.Timeout+2*cliTimeout)
	if err != nil {
		var e struct {
			Reason string `json:"reason"`
		}
		if json.Unmarshal(b, &e) == nil && e.Reason == "not_found" {
			return rootcause.Result{}, fmt.Errorf("report: task %s: %w", id, errNotFound)
		}
		if e.Reason == "not_ended" || e.Reason == "report_disabled" {
			return rootcause.Result{}, usageError{fmt.Errorf("report: %w", err)}
		}
		return rootcause.Result{}, fmt.Errorf("report: no redis configured, and the local agent did not answer: %w", err)
	}
	var res rootcause.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return rootcause.Result{}, fmt.Errorf("report: the agent's answer: %w", err)
	}
	return res, nil
}

// printReport writes the human form: one status line, then the Markdown.
func printReport(c *cli, r rootcause.Result) {
	w := terminalOut(c.stdout, false)
	fmt.Fprintf(w, "report: %s (provider %s, model %s, %d+%d tokens, %.1fs)\n", r.Status, r.Provider, r.Model,
		r.InputTokens, r.OutputTokens, r.LatencyS)
	if r.Reason != "" {
		fmt.Fprintf(w, "reason: %s\n", r.Reason)
	}
	if r.Markdown != "" {
		fmt.Fprintf(w, "\n%s\n", r.Markdown)
	}
}
