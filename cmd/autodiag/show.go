package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/open"
	rootcause "github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/agent/tracing"
)

// errNotFound is a task or entry that does not exist: exit 1.
var errNotFound = errors.New("not found")

// cliTimeout bounds the store or agent calls of one CLI command.
const cliTimeout = 10 * time.Second

func (c *cli) showCmd() *cobra.Command {
	var (
		asJSON bool
		raw    bool
		addr   string
	)
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one task's record: outcome, times, its (redacted) output and report (exit 1 when there is none)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), cliTimeout)
			defer cancel()
			tracing.SetLinkTemplate(cfg.Tracing.LinkTemplate)
			v, err := lookupTask(ctx, cfg, addr, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(jsonOut(c.stdout, raw))
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			printTask(terminalOut(c.stdout, raw), v)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the record as GET /v1/tasks/{id} returns it")
	cmd.Flags().BoolVar(&raw, "raw", false, "write the output's bytes as they are (control characters other than newline and tab are shown as \\x1b otherwise)")
	cmd.Flags().StringVar(&addr, "admin-addr", "", "local agent admin address when no Redis is configured (default: admin_addr of the config)")
	return cmd
}

// lookupTask reads a task record from Redis when one is configured, else
// from the local agent's admin API.
func lookupTask(ctx context.Context, cfg config.Config, addr, id string) (taskview.Task, error) {
	rc, err := open.RedisClient(cfg.Redis, 0)
	if err != nil {
		return taskview.Task{}, usageError{err}
	}
	if rc != nil {
		defer rc.Close()
		rec, ok, err := state.NewRedis(rc, state.RedisOptions{Prefix: cfg.Redis.Prefix}).Task(ctx, id)
		if err != nil {
			return taskview.Task{}, fmt.Errorf("show: %w", err)
		}
		if !ok {
			return taskview.Task{}, fmt.Errorf("show: task %s: %w", task.QuoteID(id), errNotFound)
		}
		return rec.View(tracing.Link), nil
	}
	if id == "" || id == "." || id == ".." {
		// No task has such an id, and as a path segment it would name
		// another endpoint.
		return taskview.Task{}, fmt.Errorf("show: task %s: %w", task.QuoteID(id), errNotFound)
	}
	target, err := newAdminTarget(ctx, cfg, addr)
	if err != nil {
		return taskview.Task{}, err
	}
	addr = target.addr
	// The id is one path segment, escaped: "../../metrics" must ask for
	// that task, not fetch another endpoint.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/tasks/"+url.PathEscape(id), nil)
	if err != nil {
		return taskview.Task{}, usageError{err}
	}
	target.creds.SetOn(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return taskview.Task{}, fmt.Errorf("show: no redis configured, and the local agent did not answer: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return taskview.Task{}, fmt.Errorf("show: task %s: %w", task.QuoteID(id), errNotFound)
	default:
		return taskview.Task{}, fmt.Errorf("show: agent at %s answered %s: %s", addr, resp.Status, strings.TrimSpace(string(body)))
	}
	var v taskview.Task
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("show: agent's answer: %w", err)
	}
	return v, nil
}

// printTask writes the human form: a header, the output in a block, the
// report.
func printTask(w io.Writer, v taskview.Task) {
	outcome := v.Outcome
	if outcome == "" {
		outcome = v.Status
	}
	fmt.Fprintf(w, "task %s: %s", v.ID, outcome)
	if v.Reason != "" {
		fmt.Fprintf(w, " (%s)", v.Reason)
	}
	fmt.Fprintln(w)
	row := func(k, val string) {
		if val != "" {
			fmt.Fprintf(w, "  %-11s %s\n", k+":", val)
		}
	}
	row("host", v.Host)
	row("as sent", v.HostAsSent)
	row("diagnostic", v.Diagnostic)
	if len(v.Params) > 0 {
		b, _ := json.Marshal(v.Params)
		row("params", string(b))
	}
	if v.Alert != nil {
		row("alert", strings.TrimSpace(v.Alert.Source+" "+v.Alert.Name+" "+v.Alert.EventID))
	}
	row("severity", v.Severity)
	if v.Origin != "" {
		row("origin", fmt.Sprintf("%s %s of task %s, step %d", v.Origin, v.Investigation, v.Parent, v.Step))
	}
	row("agent", v.Owner)
	// The machine the output describes; none for a task that never ran.
	row("ran on", v.RanOn.String())
	row("attempts", fmt.Sprint(v.Attempts))
	row("received", fmtTime(v.ReceivedAt))
	row("started", fmtTime(v.StartedAt))
	row("finished", fmtTime(v.FinishedAt))
	if !v.StartedAt.IsZero() && !v.FinishedAt.IsZero() {
		row("duration", fmt.Sprintf("%.3fs", v.FinishedAt.Sub(v.StartedAt).Seconds()))
	}
	if v.ExitCode != nil {
		row("exit code", fmt.Sprint(*v.ExitCode))
	}
	row("trace", strings.TrimSpace(v.TraceID+" "+v.TraceURL))
	row("approval", approvalLine(v.Approval))
	if len(v.Limiter) > 0 {
		row("limiter", string(v.Limiter))
	}
	row("full output", v.OutputURL)
	if v.OutputUpload != "" {
		row("full output", "upload "+v.OutputUpload+" (the record keeps max_output)")
	}
	fmt.Fprintln(w)
	head := "output"
	if v.Truncated {
		head += " (truncated)"
	}
	fmt.Fprintf(w, "%s:\n", head)
	if v.Output == "" {
		fmt.Fprintln(w, "  (none)")
	} else {
		for _, l := range strings.Split(strings.TrimRight(v.Output, "\n"), "\n") {
			fmt.Fprintln(w, "  | "+l)
		}
	}
	fmt.Fprintln(w)
	if len(v.Report) == 0 || string(v.Report) == "null" {
		fmt.Fprintln(w, "report: (none)")
		return
	}
	var r rootcause.Result
	if err := json.Unmarshal(v.Report, &r); err != nil {
		fmt.Fprintf(w, "report: (unreadable: %v; see --json)\n", err)
		return
	}
	printReportText(w, r)
}

// printReportText writes a report for people: a status line, the
// grounding, the Markdown as text (headings as capitals, the rest as
// written, indented) and the investigation's tree. `--json` gives the
// record as it is.
func printReportText(w io.Writer, r rootcause.Result) {
	fmt.Fprintf(w, "report: %s", r.Status)
	if r.Confidence != "" {
		fmt.Fprintf(w, ", confidence %s", r.Confidence)
	}
	if r.Answer != nil && r.Answer.Category != "" {
		fmt.Fprintf(w, ", category %s", r.Answer.Category)
	}
	fmt.Fprintf(w, " (%s %s, %d+%d tokens, %.1fs)\n", r.Provider, r.Model, r.InputTokens, r.OutputTokens, r.LatencyS)
	if g := r.Grounding; g != nil {
		fmt.Fprintf(w, "  grounding:  %d of %d citations verified", g.Verified, g.Cited)
		if n := len(g.Unverified); n > 0 {
			fmt.Fprintf(w, ", %d not", n)
		}
		fmt.Fprintln(w)
		if g.Lowered != "" {
			fmt.Fprintf(w, "  lowered:    %s\n", g.Lowered)
		}
	}
	if r.Unstructured {
		fmt.Fprintln(w, "  unstructured: the model gave no answer of the schema; its free text below was not checked")
	}
	if r.Reason != "" {
		fmt.Fprintf(w, "  reason:     %s\n", r.Reason)
	}
	if r.Markdown != "" {
		fmt.Fprintln(w)
		for _, l := range strings.Split(strings.TrimRight(r.Markdown, "\n"), "\n") {
			if h, ok := strings.CutPrefix(l, "## "); ok {
				fmt.Fprintf(w, "  %s\n", strings.ToUpper(h))
				continue
			}
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	if r.Investigation != nil {
		fmt.Fprintf(w, "\n%s", r.Investigation.Tree())
	}
}

// configRedis loads the config and connects to the Redis it names; rc is
// nil when none is configured (embedded mode). Both failures are usage
// errors: the config is what is wrong.
func (c *cli) configRedis() (config.Config, redis.UniversalClient, error) {
	cfg, err := c.loadConfig()
	if err != nil {
		return config.Config{}, nil, err
	}
	rc, err := open.RedisClient(cfg.Redis, 0)
	if err != nil {
		return config.Config{}, nil, usageError{err}
	}
	return cfg, rc, nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (c *cli) notifyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "notify", Short: "Notification outbox tools (fleet mode: Redis)"}
	var (
		requeue bool
		limit   int
	)
	dead := &cobra.Command{
		Use:   "dead",
		Short: "List notifications that were given up (newest first); --requeue puts them back in the outbox",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, rc, err := c.configRedis()
			if err != nil {
				return err
			}
			if rc == nil {
				return usageError{errors.New("notify dead: needs redis (embedded mode keeps its outbox in the agent's memory)")}
			}
			defer rc.Close()
			ob := notify.NewRedisOutbox(rc, notify.RedisOptions{Prefix: cfg.Redis.Prefix})
			ctx, cancel := context.WithTimeout(cmd.Context(), cliTimeout)
			defer cancel()
			list, err := ob.ListDead(ctx, limit)
			if err != nil {
				return fmt.Errorf("notify dead: %w", err)
			}
			out := terminalOut(c.stdout, false)
			for _, e := range list {
				fmt.Fprintf(out, "%s\t%s\t%s\t%s\tattempts=%d\treason=%s\tdied=%s\n", e.Ref, e.ID, e.Sink, e.Event,
					e.Attempts, e.Reason, e.DiedAt.UTC().Format(time.RFC3339))
			}
			if !requeue || len(list) == 0 {
				return nil
			}
			refs := make([]string, len(list))
			for i, e := range list {
				refs[i] = e.Ref
			}
			n, err := ob.Requeue(ctx, refs)
			if err != nil {
				return fmt.Errorf("notify dead: requeue: %w", err)
			}
			fmt.Fprintf(c.stdout, "requeued %d\n", n)
			return nil
		},
	}
	dead.Flags().BoolVar(&requeue, "requeue", false, "move the listed entries back into the outbox (same delivery ids)")
	dead.Flags().IntVar(&limit, "limit", 100, "most entries to list (and requeue)")
	cmd.AddCommand(dead)
	return cmd
}

// approvalLine is who decided a task's approval, when, why and via what,
// or by when it must be decided; "" for a task that needs none.
func approvalLine(a *taskview.Approval) string {
	switch {
	case a == nil:
		return ""
	case a.Decision == "":
		return "awaiting, until " + a.Deadline.UTC().Format(time.RFC3339) + " (autodiag approve|deny)"
	}
	line := a.Decision + " by " + a.By
	if a.Via != "" {
		line += " via " + a.Via
	}
	if a.DecidedAt != nil {
		line += " at " + a.DecidedAt.UTC().Format(time.RFC3339)
	}
	if a.Reason != "" {
		line += ": " + a.Reason
	}
	return line
}
