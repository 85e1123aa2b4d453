// Command autodiag is the diagnostic sidecar of an EC2 Auto Scaling fleet:
// `autodiag run` is the agent; the other subcommands enqueue tasks, show
// the fleet, explain and dry-run limits, validate a config and ask the
// local agent to drain. Only this package reads flags, the environment and
// files.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent"
	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/supervisor"
	"github.com/autodiag/autodiag/agent/tracing"
)

// Exit codes (README "CLI").
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
	// exitDrained (EX_TEMPFAIL) ends a drain that leaves the instance
	// running; the unit restarts the agent on it.
	exitDrained = 75
)

// errDrained is what `autodiag run` ends with after a drain that was not a
// termination nor a stop (supervisor.EndingDrained).
var errDrained = errors.New("drained without a termination; the instance stays, so the agent should be started again")

// usageError marks errors that exit 2: a bad command line or config. Every
// usage error cobra can produce is wrapped in one where cobra reports it
// (flag parsing, argument validation, unknown commands), so the exit code
// never depends on cobra's wording.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	code := exitCode(err)
	if err != nil {
		fmt.Fprintln(stderr, "autodiag:", err)
	}
	return code
}

// exitCode maps what a command returned to the process's exit status.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errDrained):
		return exitDrained
	case errors.As(err, new(usageError)):
		return exitUsage
	}
	return exitRuntime
}

// endingResult is what `autodiag run` returns after a drain that Run
// finished without an error: nil when the agent is done (exit 0),
// errDrained when the instance stays (75). Run's errors exit 1.
func endingResult(ending supervisor.Ending) error {
	if ending == supervisor.EndingDrained {
		return errDrained
	}
	return nil
}

type cli struct {
	stdout, stderr io.Writer
	configPath     string
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	c := &cli{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "autodiag",
		Short:         "Diagnostic tasks from alerts, rate-limited, drained cleanly on EC2 Auto Scaling",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&c.configPath, "config", "", "config file (default $AUTODIAG_CONFIG; none = embedded defaults)")
	root.AddCommand(c.runCmd(), c.enqueueCmd(), c.statusCmd(), c.limitsCmd(), c.configCmd(), c.drainCmd(),
		c.intakeCmd(), c.routesCmd(), c.showCmd(), c.notifyCmd(), c.reportCmd(), c.healthcheckCmd(), c.lifecycleCmd(),
		c.doctorCmd(), demoCmd(c), c.feedbackCmd(), c.reportStatsCmd(), approvalCmd(c, true), approvalCmd(c, false))
	addVersion(root)
	// The root runs only to name an unknown command (cobra's own check
	// returns an untyped error) or to print help.
	root.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return nil
	}
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if done, err := printVersion(cmd); done {
			return err
		}
		return cmd.Help()
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	typeArgErrors(root)
	return root
}

// typeArgErrors makes every argument check in the tree return a usageError.
func typeArgErrors(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		typeArgErrors(sub)
	}
}

// requireFlags reports the named flags that were not set, as a usage error.
func requireFlags(cmd *cobra.Command, names ...string) error {
	var missing []string
	for _, n := range names {
		if !cmd.Flags().Changed(n) {
			missing = append(missing, strconv.Quote(n))
		}
	}
	if len(missing) > 0 {
		return usageError{fmt.Errorf("required flag(s) %s not set", strings.Join(missing, ", "))}
	}
	return nil
}

// loadConfig reads --config (or $AUTODIAG_CONFIG), applies AUTODIAG_*
// variables and validates. Errors are usage errors (exit 2).
func (c *cli) loadConfig() (config.Config, error) {
	path := c.configPath
	if path == "" {
		path = os.Getenv("AUTODIAG_CONFIG")
	}
	var data []byte
	if path != "" {
		var err error
		data, err = os.ReadFile(path)
		if err != nil {
			return config.Config{}, usageError{fmt.Errorf("config: %w", err)}
		}
	}
	cfg, err := config.Load(data, os.LookupEnv)
	if err != nil {
		where := path
		if where == "" {
			where = "embedded defaults"
		}
		return cfg, usageError{fmt.Errorf("invalid configuration (%s):\n%w", where, indent(err))}
	}
	return cfg, nil
}

func indent(err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return errors.New(strings.Join(lines, "\n"))
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	// Lines logged with a traced context name its trace_id and span_id.
	return slog.New(tracing.NewLogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
}

// runHelp is `autodiag run --help`: what an operator needs to stop the
// agent cleanly, besides what it runs.
const runHelp = `Run the agent. With no --config (and no $AUTODIAG_CONFIG) it runs on the
embedded defaults: an in-memory queue fed by POST /v1/tasks on the admin
address (127.0.0.1:9464), in-memory limiter and state, no AWS, no Redis.

Signals and drain:
  SIGTERM or SIGINT (Ctrl-C)  drain: intake stops at once, /readyz answers
                              503, running tasks finish (within
                              lifecycle.drain_timeout), a lifecycle action
                              is heartbeaten and completed once; the agent
                              logs "drained" and exits.
  a second SIGTERM/SIGINT     fast exit: running work is cancelled and
                              handed back to the queue (released).
  POST /v1/drain, autodiag drain, a lifecycle hook, a spot or rebalance
  notice also start a drain.

Exit codes:
  0   drained and done (a signal, a termination, a spot notice)
  1   runtime error, including a fast exit on a second signal
  2   usage or configuration error (every problem named with its key and line)
  75  drained but the instance stays (POST /v1/drain, back to a warm pool):
      the systemd unit restarts the agent on it`

func (c *cli) runCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Run the agent (embedded defaults with no config: in-memory queue fed by POST /v1/tasks)",
		Long:  runHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			if err := cfg.Report.CheckEnv(os.LookupEnv); err != nil {
				return usageError{fmt.Errorf("invalid configuration: report.%w", err)}
			}
			return c.runAgent(cfg)
		},
	}
}

func (c *cli) runAgent(cfg config.Config) error {
	start := time.Now()
	if path := os.Getenv(envCPUProfile); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			return fmt.Errorf("start: %w", err)
		}
		defer stop()
	}
	log := newLogger(c.stderr, cfg.LogLevel)
	// Signals: the first SIGTERM/SIGINT drains, a second one exits fast.
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigc)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	creds, err := openCredentials(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer creds.stop()
	adminCreds, err := adminCredentials(cfg, creds.lookup)
	if err != nil {
		return err
	}
	redis.SetLogger(open.RedisLogger{Logger: log.With("component", "redis")})
	opts := c.openOptions(log)
	opts.LookupEnv = creds.lookup
	a, closeAgent, err := agent.Open(ctx, cfg, opts)
	if err != nil {
		if errors.As(err, new(*open.InstanceIDError)) || errors.As(err, new(*open.TracingError)) {
			return usageError{fmt.Errorf("start: %w", err)}
		}
		return fmt.Errorf("start: %w", err)
	}
	defer closeAgent()

	// Config validation refuses admin_addr beyond loopback without
	// admin_auth, so an open listener here is a loopback one.
	admin, err := serveAdmin(ctx, cfg.AdminAddr, admin.RequireLiveAuth(adminCreds, cfg.AdminAuth.Live(creds.lookup, adminCreds), a.Handler()),
		log.With("component", "admin"))
	if err != nil {
		return err
	}
	alerts, err := startAlertListener(ctx, cfg, a, creds.lookup, log)
	if err != nil {
		admin.Shutdown()
		return err
	}
	defer alerts.shutdown()
	mode := "fleet"
	if cfg.Embedded() {
		mode = "embedded"
	}

	// The signal goroutine ends with Run: the first signal drains, a
	// second one exits fast, and Run's return ends the wait for either.
	runDone := make(chan struct{})
	sigDone := make(chan struct{})
	go func() {
		defer close(sigDone)
		select {
		case s := <-sigc:
			log.Info("signal received: draining", "signal", s.String())
			a.Drain("signal", s.String())
		case <-runDone:
			return
		}
		select {
		case s := <-sigc:
			log.Warn("second signal: fast exit, releasing running work", "signal", s.String())
			cancel()
		case <-runDone:
		}
	}()
	// The agent is ready once the admin API listens and Run serves; the
	// service manager hears READY=1 then, and STOPPING=1 when a drain starts.
	notifyDone := make(chan struct{})
	defer func() { <-notifyDone }()
	go func() {
		defer close(notifyDone)
		select {
		case <-a.Started():
		case <-runDone:
			return
		}
		log.Info("ready", "admin_addr", admin.Addr(), "mode", mode, "workers", cfg.Workers, "version", version,
			"startup", time.Since(start).Seconds(), "pid", os.Getpid())
		sdNotify(log, sdReady)
		select {
		case <-a.Draining():
		case <-runDone:
		}
		// A drain that ends at once closes both channels before this
		// goroutine looks: the drain decides, not which one select picks.
		select {
		case <-a.Draining():
			sdNotify(log, sdStopping)
		default:
		}
	}()

	// WatchdogSec in the unit: WATCHDOG=1 from ready on, while the admin
	// listener answers, until the agent exits.
	wdCtx, wdStop := context.WithCancel(ctx)
	wdDone := make(chan struct{})
	go func() {
		defer close(wdDone)
		select {
		case <-a.Started():
		case <-wdCtx.Done():
			return
		}
		runWatchdog(wdCtx, watchdogInterval(), healthzCheck(admin.Addr()), func(s string) { sdNotify(log, s) },
			log.With("component", "watchdog"))
	}()
	defer func() { wdStop(); <-wdDone }()

	runErr := a.Run(ctx)
	close(runDone)
	<-sigDone
	admin.Shutdown()
	if runErr != nil {
		return runErr
	}
	return endingResult(a.Ending())
}

func (c *cli) drainCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Ask the local agent to drain (POST /v1/drain on the loopback admin endpoint)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			target := adminTarget{addr: addr}
			// The config gives the address when --admin-addr does not, and
			// admin_auth whenever a config is named.
			if addr == "" || c.configPath != "" || os.Getenv("AUTODIAG_CONFIG") != "" {
				cfg, err := c.loadConfig()
				if err != nil {
					return err
				}
				if target, err = newAdminTarget(cmd.Context(), cfg, addr); err != nil {
					return err
				}
			}
			body, err := adminCall(cmd.Context(), http.MethodPost, target, "/v1/drain", nil)
			if err != nil {
				return err
			}
			fmt.Fprint(c.stdout, string(body))
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "admin-addr", "", "agent admin address (default: admin_addr of the config)")
	return cmd
}

// adminCredentials reads the secret admin_auth names through lookup (the
// environment and the secret store); one unset is a configuration error
// (exit 2) naming its key.
func adminCredentials(cfg config.Config, lookup func(string) (string, bool)) (alert.Credentials, error) {
	creds, err := cfg.AdminCredentials(lookup)
	if err != nil {
		return alert.Credentials{}, usageError{fmt.Errorf("invalid configuration: %w", err)}
	}
	return creds, nil
}

// adminTarget is a local agent's admin API as the CLI calls it: its
// address and the credentials admin_auth names.
type adminTarget struct {
	addr  string
	creds alert.Credentials
}

// newAdminTarget is addr (admin_addr of cfg when empty) with admin_auth's
// credentials from the environment.
func newAdminTarget(ctx context.Context, cfg config.Config, addr string) (adminTarget, error) {
	if addr == "" {
		addr = cfg.AdminAddr
	}
	lookup, err := cliLookup(ctx, cfg, cfg.AdminAuth.SecretRefs())
	if err != nil {
		return adminTarget{}, err
	}
	creds, err := adminCredentials(cfg, lookup)
	if err != nil {
		return adminTarget{}, err
	}
	return adminTarget{addr: addr, creds: creds}, nil
}

// adminCall talks to a local agent's admin HTTP.
func adminCall(ctx context.Context, method string, target adminTarget, path string, body io.Reader) ([]byte, error) {
	return adminCallBounded(ctx, method, target, path, body, 10*time.Second)
}

// adminCallTimeout is adminCall without a body, for a call that takes
// longer than the usual 10 s (a report's model call).
func adminCallTimeout(ctx context.Context, method string, target adminTarget, path string, timeout time.Duration) ([]byte, error) {
	return adminCallBounded(ctx, method, target, path, nil, timeout)
}

func adminCallBounded(ctx context.Context, method string, target adminTarget, path string, body io.Reader, timeout time.Duration) ([]byte, error) {
	addr := target.addr
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, body)
	if err != nil {
		return nil, err
	}
	target.creds.SetOn(req)
	tracing.Inject(ctx, req.Header.Set)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	client := &http.Client{Timeout: timeout}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent at %s: %w", addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return b, fmt.Errorf("agent answered %s: %s", resp.Status, e.Error)
		}
		return b, fmt.Errorf("agent answered %s", resp.Status)
	}
	return b, nil
}
