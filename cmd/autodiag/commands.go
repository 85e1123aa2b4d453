package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/limiter"
)

func (c *cli) configCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Configuration tools"}
	var unit string
	validate := &cobra.Command{
		Use:   "validate",
		Short: "Validate a config file: exit 0, or 2 with every problem naming its key and line",
		Args:  cobra.NoArgs,
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
			if cfg.InstanceID == "" && cfg.NeedsEC2InstanceID() {
				// The agent would refuse to start: discover now, as it will.
				if _, err := agent.ResolveInstanceID(cmd.Context(), cfg, c.openOptions(nil)); err != nil {
					if errors.As(err, new(*agent.InstanceIDError)) {
						return usageError{err}
					}
					return err
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
	cmd.AddCommand(validate)
	return cmd
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
		t        task.Task
		params   []string
		queueURL string
		addr     string
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
			if queueURL == "" {
				target, err := newAdminTarget(cfg, addr)
				if err != nil {
					return err
				}
				out, err := adminCall(cmd.Context(), http.MethodPost, target, "/v1/tasks", bytes.NewReader(body))
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
			out, err := sqs.NewFromConfig(awsCfg).SendMessage(ctx, &sqs.SendMessageInput{
				QueueUrl: aws.String(queueURL), MessageBody: aws.String(string(body)),
			})
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
	return cmd
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
				target, err := newAdminTarget(cfg, addr)
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
			fv, err := fleetView(ctx, state.NewRedis(rc, state.RedisOptions{Prefix: cfg.Redis.Prefix}), recent)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(c.stdout)
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
	w := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INSTANCE\tSTATE\tINFLIGHT\tVERSION\tSEEN")
	for _, in := range fv.Instances {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s ago\n", in.ID, in.State, len(in.Tasks), in.Version, fv.At.Sub(in.SeenAt).Round(time.Second))
	}
	w.Flush()
	fmt.Fprintln(c.stdout)
	w = tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "IN FLIGHT\tINSTANCE\tHOST\tDIAGNOSTIC\tAGE")
	for _, in := range fv.Instances {
		for _, t := range in.Tasks {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.TaskID, in.ID, t.Host, t.Diagnostic, t.Age)
		}
	}
	w.Flush()
	fmt.Fprintln(c.stdout)
	w = tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
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
	fmt.Fprintf(c.stdout, "\nlast %d outcomes: %s\n", len(fv.Recent), strings.Join(parts, " "))
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
	check := &cobra.Command{
		Use:   "check --host H --diagnostic D [--severity S]",
		Short: "Dry-run one decision against the configured Redis (consumes nothing), with the holders of its concurrency slots and its breakers' state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlags(cmd, "host", "diagnostic"); err != nil {
				return err
			}
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			v, err := agent.NewValidator(cfg)
			if err != nil {
				return usageError{err}
			}
			host, err := v.ValidateHost(req.Host)
			if err != nil {
				return usageError{err}
			}
			req.Host = host
			backend := limiter.Backend(limiter.NewMemory())
			rc, err := agent.NewRedisClient(cfg.Redis)
			if err != nil {
				return usageError{err}
			}
			if rc != nil {
				defer rc.Close()
				backend = limiter.NewRedis(rc, cfg.Redis.Prefix)
			}
			lim, err := limiter.New(cfg.Limiter.Config, backend, limiter.Options{Timeout: cfg.Redis.Timeout})
			if err != nil {
				return usageError{err}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			dec, err := lim.Check(ctx, req)
			if err != nil {
				return fmt.Errorf("limits check: %w", err)
			}
			rules, err := lim.Inspect(ctx, req)
			if err != nil {
				return fmt.Errorf("limits check: %w", err)
			}
			view := decisionView(dec)
			view["state"] = ruleStatesView(rules, time.Now())
			enc := json.NewEncoder(c.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(view)
		},
	}
	check.Flags().StringVar(&req.Host, "host", "", "target host (required)")
	check.Flags().StringVar(&req.Diagnostic, "diagnostic", "", "diagnostic (required)")
	check.Flags().StringVar(&req.Severity, "severity", "", "severity")
	cmd.AddCommand(check)
	return cmd
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
