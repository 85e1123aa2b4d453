package main

import (
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent/approval"
)

// approvalCmd is `autodiag approve` (approve true) or `autodiag deny`: a
// person's decision on a task parked for approval, through the local
// agent (POST /v1/approvals/{task_id}, admin auth). A function of the
// cli, not a method: the cli's methods are one per command and at their
// ceiling (internal/archtest), and the two commands are one.
func approvalCmd(c *cli, approve bool) *cobra.Command {
	var reason, by, addr string
	verb, decision := "deny", "deny"
	if approve {
		verb, decision = "approve", "approve"
	}
	cmd := &cobra.Command{
		Use:   verb + " TASK_ID [--by NAME] [--reason TEXT]",
		Short: strings.ToUpper(verb[:1]) + verb[1:] + " a task waiting for approval (a diagnostic with approval: required)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if by == "" {
				by = os.Getenv("USER")
			}
			d := approval.Decision{Approve: approve, By: by, Reason: reason, Via: approval.ViaCLI}
			if err := d.Validate(); err != nil {
				return usageError{err}
			}
			return postAdmin(cmd.Context(), c, addr, "/v1/approvals/"+url.PathEscape(args[0]),
				map[string]string{"decision": decision, "by": d.By, "reason": d.Reason, "via": d.Via})
		},
	}
	f := cmd.Flags()
	f.StringVar(&reason, "reason", "", "why (at most 1024 bytes; redacted)")
	f.StringVar(&by, "by", "", "who decides (default $USER)")
	f.StringVar(&addr, "admin-addr", "", "agent admin address (default: admin_addr of the config)")
	return cmd
}
