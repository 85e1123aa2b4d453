package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/lifecycle"
)

func (c *cli) lifecycleCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "lifecycle", Short: "Lifecycle hook tools"}
	cmd.AddCommand(&cobra.Command{
		Use:   "abandon-launch",
		Short: "Complete this instance's launching action (lifecycle.launch_hook_name) with ABANDON, so the group replaces it",
		Long: "For an install that failed (user data's failure trap): CompleteLifecycleAction with ABANDON on the launch hook " +
			"the config names, for this instance, with the instance role; no aws CLI is needed. \"No active action\" counts as done.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			if cfg.Lifecycle.LaunchHookName == "" {
				return usageError{errors.New("lifecycle abandon-launch: lifecycle.launch_hook_name is not set in the configuration")}
			}
			return c.abandonLaunch(cmd.Context(), cfg)
		},
	})
	return cmd
}

// abandonLaunch completes the launching action with ABANDON through the
// lifecycle Actor: the same retries, the same bound
// (lifecycle.DefaultCompleteTimeout) and the same "no active action"
// handling as the agent's own completions.
func (c *cli) abandonLaunch(ctx context.Context, cfg config.Config) error {
	log := newLogger(c.stderr, cfg.LogLevel)
	opts := c.openOptions(log)
	id, err := open.ResolveInstanceID(ctx, cfg, opts)
	if err != nil {
		return usageError{fmt.Errorf("lifecycle abandon-launch: %w", err)}
	}
	awsCfg, err := open.AWS(ctx, cfg)
	if err != nil {
		return err
	}
	actor := lifecycle.NewActor(cfg.Lifecycle, lifecycle.Deps{AutoScaling: autoscaling.NewFromConfig(awsCfg),
		InstanceID: id, Logger: log.With("component", "lifecycle")})
	act := lifecycle.Action{InstanceID: id, ASGName: cfg.Lifecycle.ASGName, HookName: cfg.Lifecycle.LaunchHookName}
	cctx, cancel := context.WithTimeout(ctx, lifecycle.DefaultCompleteTimeout)
	defer cancel()
	if err := actor.Complete(cctx, act, lifecycle.ResultAbandon); err != nil {
		return fmt.Errorf("lifecycle abandon-launch: %w", err)
	}
	fmt.Fprintf(c.stdout, "launch action of %s (hook %s) completed with ABANDON\n", id, act.HookName)
	return nil
}
