package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent"
	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/alert/listener"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/open"
)

// listenerShutdownTimeout bounds the wait for alert listener requests in progress at
// exit. Requests begun before the drain had the whole drain to finish;
// those since are answered 503 at once, so little is left to wait for.
const listenerShutdownTimeout = time.Second

// listenerServer serves the alert listener until shutdown.
type listenerServer struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

// serveListener listens on intake.addr and serves h there, with TLS when
// intake.tls names the files. A listener beyond loopback without
// credentials never gets here: config validation and the handler's
// construction refuse it.
func serveListener(ctx context.Context, cfg alert.ListenerConfig, h http.Handler, log *slog.Logger) (*listenerServer, error) {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("alert listener: %w", err)
	}
	srv := alert.NewServer(cfg, h)
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	s := &listenerServer{srv: srv, addr: ln.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		var err error
		if cfg.TLS.Enabled() {
			err = srv.ServeTLS(ln, cfg.TLS.CertFile, cfg.TLS.KeyFile)
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("alert listener stopped", "err", err)
		}
	}()
	log.Info("alert listener listening", "addr", s.addr, "tls", cfg.TLS.Enabled())
	return s, nil
}

// shutdown stops accepting, lets requests in progress finish for at most
// listenerShutdownTimeout, then closes what is left and waits for the
// server's goroutine. nil is a no-op (no alert listener configured).
func (s *listenerServer) shutdown() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), listenerShutdownTimeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}

// startAlertListener serves a's alert listener when intake.addr is set; nil
// otherwise. Missing credentials are a configuration error (exit 2).
func startAlertListener(ctx context.Context, cfg config.Config, a *agent.Agent, lookup func(string) (string, bool), log *slog.Logger) (*listenerServer, error) {
	if !cfg.Intake.Enabled() {
		return nil, nil
	}
	// The handler records resolutions detached from the request (each
	// store call bounded by redis.timeout), so it takes no context.
	h, err := a.AlertHandler(lookup) //nolint:contextcheck // see above
	if err != nil {
		return nil, listenerStartError(err)
	}
	return serveListener(ctx, cfg.Intake, h, log.With("component", "alert_listener"))
}

// listenerStartError makes an *listener.Error a usage error (exit 2).
func listenerStartError(err error) error {
	if errors.As(err, new(*listener.Error)) {
		return usageError{fmt.Errorf("start: %w", err)}
	}
	return fmt.Errorf("start: %w", err)
}

func (c *cli) intakeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "intake",
		Short: "Run only the alert listener (no workers), sending tasks to the fleet's SQS queue",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			return c.runIntake(cfg)
		},
	}
}

// runIntake serves the standalone alert listener until a signal: the
// first answers 503 from then on and stops after standaloneDrainGrace, so
// a load balancer sees the listener go unready before its connections close; a second stops at once.
func (c *cli) runIntake(cfg config.Config) error {
	log := newLogger(c.stderr, cfg.LogLevel)
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigc)
	ctx := context.Background()
	creds, err := openCredentials(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer creds.stop()
	adminCreds, err := adminCredentials(cfg, creds.lookup)
	if err != nil {
		return err
	}
	in, err := open.StandaloneListener(ctx, cfg, c.openOptions(log), creds.lookup)
	if err != nil {
		return listenerStartError(err)
	}
	defer in.Close()
	stopTracing, err := open.ListenerTracing(ctx, cfg, c.openOptions(log), creds.lookup, in.Registry)
	if err != nil {
		return usageError{fmt.Errorf("start: %w", err)}
	}
	defer stopTracing()
	admin, err := serveAdmin(ctx, cfg.AdminAddr, admin.RequireLiveAuth(adminCreds, cfg.AdminAuth.Live(creds.lookup, adminCreds), in.AdminHandler()),
		log.With("component", "admin"))
	if err != nil {
		return err
	}
	defer admin.Shutdown()
	srv, err := serveListener(ctx, cfg.Intake, in.Handler, log.With("component", "alert_listener"))
	if err != nil {
		return err
	}
	defer srv.shutdown()
	s := <-sigc
	log.Info("signal received: the alert listener answers 503 and stops", "signal", s.String(), "grace", standaloneDrainGrace.Seconds())
	in.StartDrain()
	t := time.NewTimer(standaloneDrainGrace)
	defer t.Stop()
	select {
	case <-t.C:
	case <-sigc:
	}
	return nil
}

// serveAdmin serves h on admin_addr (loopback by default, else behind
// admin_auth, which h carries) and logs the address it listens on: the
// agent's admin API for `autodiag run`, /metrics, /healthz and /readyz for
// the standalone alert listener.
func serveAdmin(ctx context.Context, addr string, h http.Handler, log *slog.Logger) (*admin.Server, error) {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	s := admin.Serve(ln, h, log)
	log.Info("admin listening", "addr", s.Addr())
	return s, nil
}

// standaloneDrainGrace is how long a stopping standalone alert listener answers 503
// before it closes: a few health checks of a load balancer.
const standaloneDrainGrace = 5 * time.Second

func (c *cli) routesCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "routes", Short: "Alert routing tools"}
	var source string
	test := &cobra.Command{
		Use:   "test FILE",
		Short: "Show the route and tasks each alert of a saved payload would make, consuming nothing",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "source"); err != nil {
				return err
			}
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			body, err := os.ReadFile(args[0])
			if err != nil {
				return usageError{fmt.Errorf("routes test: %w", err)}
			}
			return c.routesTest(cfg, source, body)
		},
	}
	test.Flags().StringVar(&source, "source", "", "payload format: alertmanager, zabbix, cloudwatch or generic")
	cmd.AddCommand(test)
	return cmd
}

// routesTest prints, for each alert of body, its route and tasks or why it
// makes none. Nothing is sent: the router only builds and validates.
func (c *cli) routesTest(cfg config.Config, source string, body []byte) error {
	v, err := cfg.Validator()
	if err != nil {
		return err
	}
	router, err := alert.NewRouter(cfg.Routes, v)
	if err != nil {
		return usageError{fmt.Errorf("routes: %w", err)}
	}
	p, ok, err := alert.Decode(source, body)
	if !ok {
		return usageError{fmt.Errorf("--source %q: want alertmanager, zabbix, cloudwatch or generic", source)}
	}
	if err != nil {
		return fmt.Errorf("payload refused (%s): %w", alert.Reason(err), err)
	}
	ans := router.RoutePayload(p, time.Now())
	why := map[int]alert.Outcome{}
	for _, o := range append(append([]alert.Outcome{}, ans.Ignored...), ans.Rejected...) {
		why[o.Index] = o
	}
	idx := map[int]bool{}
	for i := range why {
		idx[i] = true
	}
	for i := range ans.Decisions {
		idx[i] = true
	}
	order := make([]int, 0, len(idx))
	for i := range idx {
		order = append(order, i)
	}
	sort.Ints(order)
	alerts := map[int]alert.Received{}
	for _, it := range p.Items {
		alerts[it.Index] = it.Alert
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tALERT\tROUTE\tRESULT\tTASKS / REASON")
	for _, i := range order {
		d := ans.Decisions[i]
		name := alerts[i].Name
		if name == "" {
			name = "-"
		}
		route := d.Route
		if route == "" {
			route = "-"
		}
		if d.Result == alert.ResultAccepted {
			var ts []string
			for _, t := range d.Tasks {
				ts = append(ts, taskLine(t.Diagnostic, t.Host, t.Params))
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i, name, route, d.Result, strings.Join(ts, "; "))
			continue
		}
		o := why[i]
		result := d.Result
		if result == "" {
			result = alert.ResultIgnored
			for _, r := range ans.Rejected {
				if r.Index == i {
					result = alert.ResultRejected
				}
			}
		}
		reason := o.Reason
		if o.Detail != "" {
			reason += " (" + o.Detail + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i, name, route, result, reason)
	}
	if p.Truncated > 0 {
		fmt.Fprintf(tw, "-\t-\t-\ttruncated\t%d alerts left out by the sender\n", p.Truncated)
	}
	return tw.Flush()
}

func taskLine(diagnostic, host string, params map[string]string) string {
	s := diagnostic + " host=" + host
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s += " " + k + "=" + params[k]
	}
	return s
}
