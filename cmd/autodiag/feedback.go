package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent/feedback"
)

// feedbackCmd records a responder's verdict on a task's report through the
// local agent (POST /v1/tasks/{id}/feedback, admin auth).
func (c *cli) feedbackCmd() *cobra.Command {
	var note, by, addr string
	cmd := &cobra.Command{
		Use:   "feedback TASK_ID good|wrong [--note TEXT] [--by NAME]",
		Short: "Record your verdict on a task's root-cause report, once per person",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if by == "" {
				by = os.Getenv("USER")
			}
			v := feedback.Verdict{TaskID: args[0], Verdict: args[1], By: by, Note: note}
			if err := v.Validate(); err != nil {
				return usageError{err}
			}
			return postAdmin(cmd.Context(), c, addr, "/v1/tasks/"+url.PathEscape(v.TaskID)+"/feedback",
				map[string]string{"verdict": v.Verdict, "by": v.By, "note": v.Note})
		},
	}
	f := cmd.Flags()
	f.StringVar(&note, "note", "", "why (at most 1024 bytes; redacted)")
	f.StringVar(&by, "by", "", "who judges (default $USER); one verdict per person and task")
	f.StringVar(&addr, "admin-addr", "", "agent admin address (default: admin_addr of the config)")
	return cmd
}

// reportStatsCmd prints the precision of reports by category (diagnostic)
// and confidence, from the responders' verdicts (GET /v1/reports/stats).
func (c *cli) reportStatsCmd() *cobra.Command {
	var addr string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "report-stats [--json]",
		Short: "Precision of root-cause reports by diagnostic and confidence, from responders' verdicts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			target, err := newAdminTarget(cmd.Context(), cfg, addr)
			if err != nil {
				return err
			}
			out, err := adminCall(cmd.Context(), http.MethodGet, target, "/v1/reports/stats", nil)
			if err != nil {
				return err
			}
			if asJSON {
				fmt.Fprint(c.stdout, string(out))
				return nil
			}
			var st struct {
				Verdicts    int            `json:"verdicts"`
				Resolutions int            `json:"resolutions"`
				Rows        []feedback.Row `json:"rows"`
			}
			if err := json.Unmarshal(out, &st); err != nil {
				return errors.New("report-stats: the agent's answer is not the stats JSON")
			}
			// Diagnostic names come from the config, confidences from a
			// model: shown with control characters escaped.
			return printReportStats(terminalOut(c.stdout, false), st.Verdicts, st.Resolutions, st.Rows)
		},
	}
	cmd.Flags().StringVar(&addr, "admin-addr", "", "agent admin address (default: admin_addr of the config)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print GET /v1/reports/stats's JSON")
	return cmd
}

func printReportStats(w io.Writer, verdicts, resolutions int, rows []feedback.Row) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no verdicts or resolutions yet: autodiag feedback TASK_ID good|wrong; Alertmanager send_resolved: true")
		return err
	}
	pct := func(n int, share float64) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", 100*share)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DIAGNOSTIC\tCONFIDENCE\tGOOD\tWRONG\tPRECISION\tRESOLVED\tWITHIN 1H")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%s\n", r.Diagnostic, r.Confidence, r.Good, r.Wrong,
			pct(r.Good+r.Wrong, r.Precision), r.Resolved, pct(r.Resolved, r.WithinShare))
	}
	fmt.Fprintf(tw, "\n%d verdicts, %d resolved reports\n", verdicts, resolutions)
	return tw.Flush()
}
