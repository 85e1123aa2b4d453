package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/spf13/cobra"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/autodiag/autodiag/agent"
	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/instance"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/limiter"
)

func (c *cli) configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Configuration tools"}
	var (
		unit   string
		strict bool
	)
	validate := &cobra.Command{
		Use:   "validate",
		Short: "Validate a config file offline: exit 0, or 2 with every problem naming its key and line",
		Long: `Validate a config file without the network: syntax, types, ranges, the
rules between keys and, with --systemd-unit, the unit's stop timeout. What
only the environment can answer (an instance id from instance metadata, a
variable a *_env key names) is a warning; autodiag doctor checks the
environment itself.`,
		// The file is a flag, like every command's config; a file given
		// as an argument gets the command to type.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("config validate takes the file as a flag: autodiag config validate --config %s", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.configPath == "" {
				return usageError{errors.New("config validate: --config FILE is required")}
			}
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			if unit != "" {
				if err := checkUnit(unit, cfg.Drain.Timeout); err != nil {
					return usageError{err}
				}
			}
			for _, w := range c.offlineWarnings(cmd.Context(), cfg) {
				fmt.Fprintln(c.stderr, "warning:", w)
			}
			if unset := unsetEnv(cfg, os.LookupEnv); len(unset) > 0 {
				for _, u := range unset {
					fmt.Fprintf(c.stderr, "warning: %s here; `autodiag run` exits 2 without it\n", u)
				}
				if strict {
					return usageError{fmt.Errorf("config validate --strict: %d *_env variable(s) unset", len(unset))}
				}
			}
			mode := "fleet"
			if cfg.Embedded() {
				mode = "embedded"
			}
			fmt.Fprintf(c.stdout, "%s: ok (%s mode, %d diagnostics, %d limiter rules, lifecycle sources %v)\n",
				c.configPath, mode, len(cfg.Diagnostics), len(cfg.Limiter.Rules), cfg.Lifecycle.Sources)
			return nil
		},
	}
	validate.Flags().StringVar(&unit, "systemd-unit", "", "also check that the unit's TimeoutStopSec exceeds lifecycle.drain_timeout")
	validate.Flags().BoolVar(&strict, "strict", false, "fail (exit 2) when a variable named by a *_env key is unset, as the agent (autodiag run) would")
	cmd.AddCommand(validate)
	return cmd
}

// offlineWarnings is what config validate can tell of the environment
// without the network: an instance id the files on this machine do not
// hold (the agent asks instance metadata at start). Unset *_env variables
// are unsetEnv's (envcheck.go), which --strict turns into an error.
func (c *cli) offlineWarnings(ctx context.Context, cfg config.Config) []string {
	out := cfg.Warnings()
	if cfg.InstanceID == "" && cfg.NeedsEC2InstanceID() {
		o := c.openOptions(nil)
		// IMDS nil: files only, never the instance-metadata address.
		if _, _, err := instance.Discover(ctx, instance.Options{CloudInitPath: o.CloudInitPath, DMIAssetTagPath: o.DMIAssetTagPath}); err != nil {
			out = append(out, fmt.Sprintf("instance_id is empty and no file here holds one (%v); the agent asks instance metadata at start and refuses to start without an id: set instance_id or AUTODIAG_INSTANCE_ID off EC2, or run `autodiag doctor` on the instance", err))
		}
	}
	return out
}

// checkUnit: systemd must give a drain its whole budget, plus room to
// cancel, release and complete, before it SIGKILLs the agent.
func checkUnit(path string, drain time.Duration) error {
	stop, infinite, ok, err := unitStopTimeout(path)
	if err != nil {
		return fmt.Errorf("--systemd-unit: %w", err)
	}
	if !ok {
		stop = 90 * time.Second // systemd's DefaultTimeoutStopSec
	}
	if !infinite && stop <= drain {
		return fmt.Errorf("lifecycle.drain_timeout: %s is not below %s's TimeoutStopSec (%s): systemd would SIGKILL the agent mid-drain, before it completes the lifecycle action", drain, path, stop)
	}
	return nil
}

// Where instance id discovery reads its file fallbacks instead of EC2's
// paths (README "Configuration", instance_id): for tests, and images that
// keep cloud-init's data elsewhere.
const (
	envCloudInitPath = "AUTODIAG_INSTANCE_ID_CLOUD_INIT_PATH"
	envDMIPath       = "AUTODIAG_INSTANCE_ID_DMI_PATH"
)

// openOptions are the agent's start options from the environment.
func (c *cli) openOptions(log *slog.Logger) agent.OpenOptions {
	return agent.OpenOptions{Logger: log, Version: version,
		CloudInitPath: os.Getenv(envCloudInitPath), DMIAssetTagPath: os.Getenv(envDMIPath),
		LookupEnv: os.LookupEnv}
}

func (c *cli) enqueueCmd() *cobra.Command {
	var (
		t           task.Task
		params      []string
		queueURL    string
		addr        string
		traceparent string
	)
	cmd := &cobra.Command{
		Use:   "enqueue --host H --diagnostic D [--param k=v]...",
		Short: "Put a task on the queue (SQS SendMessage), or POST it to a local embedded agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, p := range params {
				k, v, ok := strings.Cut(p, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("--param %q: want NAME=VALUE", p)}
				}
				if t.Params == nil {
					t.Params = map[string]string{}
				}
				t.Params[k] = v
			}
			if t.Host == "" || t.Diagnostic == "" {
				return usageError{errors.New("--host and --diagnostic are required")}
			}
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			if queueURL == "" {
				queueURL = cfg.Queue.URL
			}
			if t.CreatedAt.IsZero() {
				t.CreatedAt = time.Now().UTC()
			}
			body, _ := json.Marshal(t)
			tctx, err := withTraceparent(cmd.Context(), traceparent)
			if err != nil {
				return err
			}
			if queueURL == "" {
				target, err := newAdminTarget(cmd.Context(), cfg, addr)
				if err != nil {
					return err
				}
				out, err := adminCall(tctx, http.MethodPost, target, "/v1/tasks", bytes.NewReader(body))
				if err != nil {
					return err
				}
				fmt.Fprint(c.stdout, string(out))
				return nil
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
			if err != nil {
				return fmt.Errorf("aws config: %w", err)
			}
			in := &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(string(body))}
			tracing.Inject(tctx, func(k, v string) {
				if in.MessageAttributes == nil {
					in.MessageAttributes = map[string]sqstypes.MessageAttributeValue{}
				}
				in.MessageAttributes[k] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
			})
			out, err := sqs.NewFromConfig(awsCfg).SendMessage(ctx, in)
			if err != nil {
				return fmt.Errorf("enqueue: %w", err)
			}
			fmt.Fprintf(c.stdout, "{\"message_id\": %q, \"id\": %q}\n", aws.ToString(out.MessageId), t.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&t.Host, "host", "", "target host (required)")
	f.StringVar(&t.Diagnostic, "diagnostic", "", "catalog diagnostic (required)")
	f.StringArrayVar(&params, "param", nil, "diagnostic parameter NAME=VALUE (repeatable)")
	f.StringVar(&t.ID, "id", "", "task id (idempotency key; default: the SQS message id)")
	f.StringVar(&t.Severity, "severity", "", "alert severity")
	f.StringVar(&t.Alert.EventID, "event-id", "", "alert event id (dedupe key)")
	f.StringVar(&queueURL, "queue-url", "", "SQS queue URL (default: queue.url / $AUTODIAG_QUEUE_URL; none = POST to the local agent)")
	f.StringVar(&addr, "admin-addr", "", "local agent admin address (default: admin_addr of the config)")
	f.StringVar(&traceparent, "traceparent", os.Getenv("TRACEPARENT"),
		"W3C traceparent the task's trace continues (default: $TRACEPARENT); sent as the message's traceparent attribute")
	return cmd
}

// withTraceparent is ctx holding the remote span context tp names ("" =
// ctx unchanged); a malformed one is a usage error.
func withTraceparent(ctx context.Context, tp string) (context.Context, error) {
	if tp == "" {
		return ctx, nil
	}
	sc, ok := tracing.ParseTraceparent(tp)
	if !ok {
		return ctx, usageError{fmt.Errorf("--traceparent %q is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)", tp)}
	}
	return oteltrace.ContextWithRemoteSpanContext(ctx, sc), nil
}

func (c *cli) statusCmd() *cobra.Command {
	var (
		asJSON bool
		recent int
		addr   string
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Fleet view from Redis: instances, their state, in-flight tasks, recent outcomes (local agent without Redis)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, rc, err := c.configRedis()
			if err != nil {
				return err
			}
			if rc == nil {
				target, err := newAdminTarget(cmd.Context(), cfg, addr)
				if err != nil {
					return err
				}
				out, err := adminCall(cmd.Context(), http.MethodGet, target, "/v1/status", nil)
				if err != nil {
					return fmt.Errorf("no redis configured, and the local agent did not answer: %w", err)
				}
				fmt.Fprint(c.stdout, string(out))
				return nil
			}
			defer rc.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			fv, err := fleetView(ctx, state.NewRedis(rc, state.RedisOptions{Prefix: cfg.Redis.Prefix, AuditShards: cfg.Redis.AuditShards, InstanceShards: cfg.Redis.InstanceShards}), recent)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(jsonOut(c.stdout, false))
				enc.SetIndent("", "  ")
				return enc.Encode(fv)
			}
			printFleet(c, fv)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().IntVar(&recent, "recent", 20, "recent outcomes to show")
	cmd.Flags().StringVar(&addr, "admin-addr", "", "local agent admin address when no Redis is configured")
	return cmd
}

// FleetView is `autodiag status --json`.
type FleetView struct {
	Instances []InstanceView     `json:"instances"`
	Recent    []state.AuditEntry `json:"recent"`
	Outcomes  map[string]int     `json:"recent_outcomes"`
	At        time.Time          `json:"at"`
}

// InstanceView is one instance with its in-flight tasks.
type InstanceView struct {
	state.Instance
	Tasks []InflightView `json:"tasks"`
}

// InflightView is one in-flight task with its age.
type InflightView struct {
	state.InflightEntry
	Age string `json:"age"`
}

// fleetSource is what the fleet view reads from the state store.
type fleetSource interface {
	Instances(ctx context.Context) ([]state.Instance, error)
	Inflight(ctx context.Context, instanceID string) ([]state.InflightEntry, error)
	RecentAudit(ctx context.Context, n int) ([]state.AuditEntry, error)
}

func fleetView(ctx context.Context, st fleetSource, recent int) (FleetView, error) {
	now := time.Now()
	fv := FleetView{At: now, Outcomes: map[string]int{}}
	insts, err := st.Instances(ctx)
	if err != nil {
		return fv, fmt.Errorf("status: instances: %w", err)
	}
	for _, in := range insts {
		iv := InstanceView{Instance: in, Tasks: []InflightView{}}
		tasks, err := st.Inflight(ctx, in.ID)
		if err != nil {
			return fv, fmt.Errorf("status: in-flight of %s: %w", in.ID, err)
		}
		for _, t := range tasks {
			iv.Tasks = append(iv.Tasks, InflightView{InflightEntry: t, Age: now.Sub(t.StartedAt).Round(time.Second).String()})
		}
		fv.Instances = append(fv.Instances, iv)
	}
	fv.Recent, err = st.RecentAudit(ctx, recent)
	if err != nil {
		return fv, fmt.Errorf("status: audit: %w", err)
	}
	for _, e := range fv.Recent {
		fv.Outcomes[e.Outcome]++
	}
	return fv, nil
}

func printFleet(c *cli, fv FleetView) {
	out := terminalOut(c.stdout, false)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INSTANCE\tSTATE\tINFLIGHT\tVERSION\tSEEN")
	for _, in := range fv.Instances {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s ago\n", in.ID, in.State, len(in.Tasks), in.Version, fv.At.Sub(in.SeenAt).Round(time.Second))
	}
	w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "IN FLIGHT\tINSTANCE\tHOST\tDIAGNOSTIC\tAGE")
	for _, in := range fv.Instances {
		for _, t := range in.Tasks {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.TaskID, in.ID, t.Host, t.Diagnostic, t.Age)
		}
	}
	w.Flush()
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\tINSTANCE\tTASK\tHOST\tDIAGNOSTIC\tOUTCOME\tREASON")
	for _, e := range fv.Recent {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Format(time.RFC3339), e.InstanceID, e.TaskID, e.Host, e.Diagnostic, e.Outcome, e.Reason)
	}
	w.Flush()
	keys := make([]string, 0, len(fv.Outcomes))
	for k := range fv.Outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, fv.Outcomes[k]))
	}
	fmt.Fprintf(out, "\nlast %d outcomes: %s\n", len(fv.Recent), strings.Join(parts, " "))
}

func (c *cli) limitsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "limits", Short: "Explain and dry-run the limiter policy"}
	cmd.AddCommand(&cobra.Command{
		Use:   "explain",
		Short: "Print each rule normalised: per-second rate, burst ceiling, concurrency, breaker, shadow, when denials start, block, fail mode, next reset",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
			if err != nil {
				return usageError{err}
			}
			return limiter.WriteExplain(c.stdout, lim.Explain(time.Now()))
		},
	})
	var req limiter.Request
	var addr string
	check := &cobra.Command{
		Use:   "check --host H --diagnostic D [--severity S]",
		Short: "Dry-run one decision against the configured Redis, or without Redis the running agent's limiter (consumes nothing), with the holders of its concurrency slots and its breakers' state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "host", "diagnostic"); err != nil {
				return err
			}
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			v, err := cfg.Validator()
			if err != nil {
				return usageError{err}
			}
			host, err := v.ValidateHost(req.Host)
			if err != nil {
				return usageError{err}
			}
			req.Host = host
			rc, err := open.RedisClient(cfg.Redis, 0)
			if err != nil {
				return usageError{err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			var dec limiter.Decision
			var rules []limiter.RuleState
			if rc != nil {
				defer rc.Close()
				lim, err := limiter.New(cfg.Limiter.Config, limiter.NewRedis(rc, cfg.Redis.Prefix), limiter.Options{Timeout: cfg.Redis.Timeout})
				if err != nil {
					return usageError{err}
				}
				if dec, err = lim.Check(ctx, req); err != nil {
					return fmt.Errorf("limits check: %w", err)
				}
				if rules, err = lim.Inspect(ctx, req); err != nil {
					return fmt.Errorf("limits check: %w", err)
				}
			} else {
				// Embedded mode: the limiter lives in the running agent's
				// memory; a fresh one here would answer "allowed" while
				// the agent denies.
				got, err := askAgentLimits(ctx, cfg, addr, req)
				if err != nil {
					return fmt.Errorf("limits check: %w", err)
				}
				dec, rules = got.Decision, got.State
			}
			view := decisionView(dec)
			view["state"] = ruleStatesView(rules, time.Now())
			enc := json.NewEncoder(jsonOut(c.stdout, false))
			enc.SetIndent("", "  ")
			return enc.Encode(view)
		},
	}
	check.Flags().StringVar(&req.Host, "host", "", "target host (required)")
	check.Flags().StringVar(&req.Diagnostic, "diagnostic", "", "diagnostic (required)")
	check.Flags().StringVar(&req.Severity, "severity", "", "severity")
	check.Flags().StringVar(&addr, "admin-addr", "", "local agent admin address when no Redis is configured (default: admin_addr of the config)")
	cmd.AddCommand(check)
	return cmd
}

// askAgentLimits asks the local agent's admin API for a dry-run decision
// of its own limiter (GET /v1/limits/check).
func askAgentLimits(ctx context.Context, cfg config.Config, addr string, req limiter.Request) (admin.LimitsCheck, error) {
	target, err := newAdminTarget(ctx, cfg, addr)
	if err != nil {
		return admin.LimitsCheck{}, err
	}
	q := url.Values{"host": {req.Host}, "diagnostic": {req.Diagnostic}}
	if req.Severity != "" {
		q.Set("severity", req.Severity)
	}
	b, err := adminCall(ctx, http.MethodGet, target, "/v1/limits/check?"+q.Encode(), nil)
	if err != nil {
		return admin.LimitsCheck{}, fmt.Errorf("no redis configured, and the local agent did not answer: %w", err)
	}
	var got admin.LimitsCheck
	if err := json.Unmarshal(b, &got); err != nil {
		return admin.LimitsCheck{}, fmt.Errorf("the agent's answer: %w", err)
	}
	return got, nil
}

func decisionView(d limiter.Decision) map[string]any {
	shadow := make([]map[string]any, 0, len(d.Shadow))
	for _, s := range d.Shadow {
		shadow = append(shadow, map[string]any{"rule": s.Rule, "allowed": s.Allowed, "limit": s.Limit,
			"reason": s.Reason, "retry_after": s.RetryAfter.String(), "counters": countersView(s.Counters)})
	}
	return map[string]any{
		"allowed": d.Allowed, "rule": d.Rule, "limit": d.Limit, "reason": d.Reason, "on_exceed": d.OnExceed,
		"retry_after": d.RetryAfter.String(), "degraded": d.Degraded, "probe": d.Probe,
		"counters": countersView(d.Counters), "shadow": shadow,
	}
}

func countersView(c limiter.Counters) map[string]any {
	return map[string]any{
		"daily_used": c.DailyUsed, "daily_limit": c.DailyLimit,
		"since_last": c.SinceLast.String(), "window_count": c.WindowCount,
		"window_limit": c.WindowLimit, "bucket_level": c.BucketLevel,
		"bucket_capacity": c.BucketCapacity, "running": c.Running, "concurrency_limit": c.ConcurrencyLimit,
	}
}

// ruleStatesView is the live state of the rules that apply to the checked
// task: who holds their concurrency slots until when, and their failure
// breakers. Times are RFC 3339 with the seconds left from now, so an
// operator can tell when a slot of a dead agent frees.
func ruleStatesView(rules []limiter.RuleState, now time.Time) []map[string]any {
	at := func(t time.Time) map[string]any {
		return map[string]any{"at": t.UTC().Format(time.RFC3339Nano), "in_seconds": t.Sub(now).Seconds()}
	}
	out := make([]map[string]any, 0, len(rules))
	for _, r := range rules {
		v := map[string]any{"rule": r.Rule, "shadow": r.Shadow, "key": r.Key}
		if r.Concurrency > 0 || r.MaxPercent > 0 {
			holders := make([]map[string]any, 0, len(r.Holders))
			for _, h := range r.Holders {
				holders = append(holders, map[string]any{"task_id": h.TaskID, "expires": at(h.Expires)})
			}
			v["concurrency"], v["holders"] = r.Concurrency, holders
			if r.MaxPercent > 0 {
				delete(v, "concurrency")
				v["max_percent"] = r.MaxPercent
			}
		}
		if r.Breaker != "" {
			b := map[string]any{"state": r.Breaker}
			switch r.Breaker {
			case "closed":
				b["failures"] = r.Failures
			case "open":
				b["open_until"] = at(r.OpenUntil)
			case "probing":
				b["probe"], b["probe_until"] = r.Probe, at(r.ProbeUntil)
			}
			v["breaker"] = b
		}
		out = append(out, v)
	}
	return out
}
