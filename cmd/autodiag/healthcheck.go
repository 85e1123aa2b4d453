package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// healthcheckTimeout bounds `autodiag healthcheck`: below the image's
// HEALTHCHECK --timeout (5s).
const healthcheckTimeout = 3 * time.Second

// healthcheckCmd is the container image's HEALTHCHECK: GET /healthz on the
// local agent's admin listener (no credentials: probes need none), exit 0
// when it answers 200, 1 otherwise. The image has no curl.
func (c *cli) healthcheckCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the local agent answers GET /healthz (a container HEALTHCHECK)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				cfg, err := c.loadConfig()
				if err != nil && (c.configPath != "" || os.Getenv("AUTODIAG_CONFIG") != "") {
					return err
				}
				addr = cfg.AdminAddr
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), healthcheckTimeout)
			defer cancel()
			if err := healthzCheck(addr)(ctx); err != nil {
				return fmt.Errorf("agent at %s: %w", addr, err)
			}
			fmt.Fprintln(c.stdout, "ok")
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "admin-addr", "", "agent admin address (default: admin_addr of the config)")
	return cmd
}
