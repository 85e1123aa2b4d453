package open

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/instance"
	"github.com/autodiag/autodiag/lifecycle"
)

// Options are what main hands to agent.Open and the openers.
type Options struct {
	Logger  *slog.Logger
	Version string
	// Hostname is the instance id of last resort and the hostname every
	// run's ran_on names; "" = os.Hostname.
	Hostname string
	// CloudInitPath and DMIAssetTagPath are where instance id discovery
	// reads its fallbacks; "" = where EC2 keeps them (package instance).
	CloudInitPath   string
	DMIAssetTagPath string
	// LookupEnv reads the notification sinks' secrets (url_env,
	// secret_env); nil = an empty environment.
	LookupEnv func(string) (string, bool)
}

// InstanceIDError is why the agent refuses to start: its lifecycle sources
// need the EC2 instance id, instance_id is empty and discovery found none.
// It is a configuration problem (exit 2), not a runtime failure.
type InstanceIDError struct {
	Err error // the discovery's *instance.NotFoundError
}

func (e *InstanceIDError) Error() string {
	return "instance_id: the imds and sqs lifecycle sources and launch_hook_name need this instance's EC2 id: " + e.Err.Error()
}

func (e *InstanceIDError) Unwrap() error { return e.Err }

// AWS loads the SDK configuration for cfg: the default chain, with the
// region from instance metadata when the imds source is on.
func AWS(ctx context.Context, cfg config.Config) (aws.Config, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Lifecycle.Has(lifecycle.SourceIMDS) {
		opts = append(opts, awsconfig.WithEC2IMDSRegion())
	}
	c, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("aws config: %w", err)
	}
	return c, nil
}

// ResolveInstanceID returns the id Open would run under, for `config
// validate`: instance_id, else the discovered EC2 id, else (when no
// lifecycle source needs an EC2 id) the hostname. It fails with an
// *InstanceIDError where Open would refuse to start.
func ResolveInstanceID(ctx context.Context, cfg config.Config, o Options) (string, error) {
	var awsCfg *aws.Config
	if cfg.InstanceID == "" && cfg.NeedsAWS() {
		// Not AWS: instance metadata needs no region, and asking for
		// it would be one more call that can fail before discovery.
		c, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return "", fmt.Errorf("aws config: %w", err)
		}
		awsCfg = &c
	}
	return InstanceID(ctx, cfg, awsCfg, o, orDiscard(o.Logger))
}

// InstanceID asks instance metadata only when AWS is configured
// (strict IMDSv2: a session token first, no unauthenticated fallback), then
// the files package instance reads.
func InstanceID(ctx context.Context, cfg config.Config, awsCfg *aws.Config, o Options, log *slog.Logger) (string, error) {
	if cfg.InstanceID != "" {
		return cfg.InstanceID, nil
	}
	do := instance.Options{CloudInitPath: o.CloudInitPath, DMIAssetTagPath: o.DMIAssetTagPath,
		Logger: log.With("component", "instance")}
	if awsCfg != nil {
		do.IMDS = imds.NewFromConfig(*awsCfg, func(io *imds.Options) { io.EnableFallback = aws.FalseTernary })
	}
	id, source, err := instance.Discover(ctx, do)
	switch {
	case err == nil:
		log.Info("instance id discovered", "instance_id", id, "source", source)
		return id, nil
	case !errors.Is(err, instance.ErrNotFound):
		return "", fmt.Errorf("instance id: %w", err)
	case cfg.NeedsEC2InstanceID():
		return "", &InstanceIDError{Err: err}
	}
	id = o.Hostname
	if id == "" {
		if id, err = os.Hostname(); err != nil {
			return "", fmt.Errorf("instance id: no EC2 id and no hostname: %w", err)
		}
	}
	log.Info("no EC2 instance id found; using the hostname", "instance_id", id)
	return id, nil
}

// hostname is o.Hostname, else this machine's, learnt once at start; ""
// (logged) when the system cannot say.
func Hostname(o Options, log *slog.Logger) string {
	if o.Hostname != "" {
		return o.Hostname
	}
	h, err := os.Hostname()
	if err != nil {
		log.Warn("hostname unknown; records name where they ran by instance id only", "err", err)
		return ""
	}
	return h
}

func orDiscard(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}
