package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/open"
	rootcause "github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/lifecycle"
)

// doctorTimeout bounds each check of `autodiag doctor`: one answer from
// one service, on a machine where the agent is to run.
const doctorTimeout = 5 * time.Second

// doctorCheck is one line of `autodiag doctor`: what was checked, and
// "" (pass), a reason it was skipped, or what failed.
type doctorCheck struct {
	name   string
	skip   string
	err    error
	detail string
}

func (c *cli) doctorCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Check the environment a config needs: instance id, instance metadata, Redis, queue, lifecycle hook, S3, model endpoint",
		Long: `Check, from this machine, what config validate cannot: each check makes
one bounded call (` + doctorTimeout.String() + `) and prints PASS, FAIL or SKIP with why.
Exit 0 when nothing failed, 1 otherwise, 2 for an invalid config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := c.loadConfig()
			if err != nil {
				return err
			}
			checks := c.doctor(cmd.Context(), cfg)
			failed := 0
			for _, ch := range checks {
				switch {
				case ch.skip != "":
					fmt.Fprintf(c.stdout, "SKIP  %-14s %s\n", ch.name, ch.skip)
				case ch.err != nil:
					failed++
					fmt.Fprintf(c.stdout, "FAIL  %-14s %v\n", ch.name, ch.err)
				default:
					fmt.Fprintf(c.stdout, "PASS  %-14s %s\n", ch.name, ch.detail)
				}
			}
			if failed > 0 {
				return fmt.Errorf("doctor: %d of %d checks failed", failed, len(checks))
			}
			return nil
		},
	}
}

// doctor runs every check in order; a check that cannot run for want of
// an earlier answer (the instance id) skips, saying so.
func (c *cli) doctor(ctx context.Context, cfg config.Config) []doctorCheck {
	var out []doctorCheck
	bounded := func(f func(ctx context.Context) (string, error)) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, doctorTimeout)
		defer cancel()
		return f(cctx)
	}
	needAWS := cfg.NeedsEC2InstanceID() || cfg.Queue.URL != "" || cfg.Results.S3.Bucket != "" ||
		cfg.Report.Enabled && cfg.Report.Provider == rootcause.ProviderBedrock
	var awsCfg aws.Config
	var awsErr error
	if needAWS {
		awsCfg, awsErr = awsconfig.LoadDefaultConfig(ctx)
	}
	check := func(name string, skip string, f func(ctx context.Context) (string, error)) {
		switch {
		case skip != "":
			out = append(out, doctorCheck{name: name, skip: skip})
		case awsErr != nil:
			out = append(out, doctorCheck{name: name, err: fmt.Errorf("aws config: %w", awsErr)})
		default:
			d, err := bounded(f)
			out = append(out, doctorCheck{name: name, detail: d, err: err})
		}
	}

	var instanceID string
	check("instance id", "", func(ctx context.Context) (string, error) {
		id, err := open.ResolveInstanceID(ctx, cfg, c.openOptions(nil))
		instanceID = id
		if err != nil {
			return "", err
		}
		if cfg.InstanceID != "" {
			return id + " (instance_id)", nil
		}
		return id, nil
	})

	imdsSkip := ""
	if !cfg.NeedsEC2InstanceID() && !cfg.Lifecycle.Has(lifecycle.SourceIMDS) {
		imdsSkip = "no lifecycle source and no instance id needs instance metadata"
	}
	check("imds", imdsSkip, func(ctx context.Context) (string, error) {
		cl := imds.NewFromConfig(awsCfg, func(o *imds.Options) { o.EnableFallback = aws.FalseTernary })
		res, err := cl.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
		if err != nil {
			return "", fmt.Errorf("IMDSv2 instance-id: %w", err)
		}
		defer res.Content.Close()
		b, err := io.ReadAll(io.LimitReader(res.Content, 64))
		if err != nil {
			return "", fmt.Errorf("IMDSv2 instance-id: %w", err)
		}
		return "IMDSv2 answers, instance-id " + strings.TrimSpace(string(b)), nil
	})

	redisSkip := ""
	switch {
	case cfg.Redis.URLSecret != "":
		redisSkip = "redis.url_secret: the URL is read from Secrets Manager at start"
	case cfg.Redis.URL == "" && len(cfg.Redis.Addrs) == 0:
		redisSkip = "no Redis configured (in-memory limiter and state)"
	}
	check("redis", redisSkip, func(ctx context.Context) (string, error) {
		// The FAIL line says what failed; go-redis's own dial log would
		// repeat it on stderr.
		redis.SetLogger(open.RedisLogger{Logger: slog.New(slog.DiscardHandler)})
		rc, err := open.RedisClient(cfg.Redis, 0)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		if err := rc.Ping(ctx).Err(); err != nil {
			return "", fmt.Errorf("PING: %w", err)
		}
		return "PING answered", nil
	})

	queueSkip := ""
	if cfg.Queue.URL == "" {
		queueSkip = "queue.url is empty (embedded queue)"
	}
	check("queue", queueSkip, func(ctx context.Context) (string, error) {
		res, err := sqs.NewFromConfig(awsCfg).GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl:       aws.String(cfg.Queue.URL),
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameVisibilityTimeout, sqstypes.QueueAttributeNameRedrivePolicy},
		})
		if err != nil {
			return "", fmt.Errorf("GetQueueAttributes %s: %w", cfg.Queue.URL, err)
		}
		d := "visibility timeout " + res.Attributes[string(sqstypes.QueueAttributeNameVisibilityTimeout)] + " s"
		if res.Attributes[string(sqstypes.QueueAttributeNameRedrivePolicy)] == "" {
			d += ", no redrive policy (a poison message is received again and again)"
		} else {
			d += ", redrive policy set"
		}
		return d, nil
	})

	hookSkip := ""
	if cfg.Lifecycle.HookName == "" {
		hookSkip = "lifecycle.hook_name is empty"
	}
	check("lifecycle hook", hookSkip, func(ctx context.Context) (string, error) {
		as := autoscaling.NewFromConfig(awsCfg)
		asg := cfg.Lifecycle.ASGName
		if asg == "" {
			if instanceID == "" {
				return "", fmt.Errorf("lifecycle.asg_name is empty and no instance id to look its group up by")
			}
			res, err := as.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{instanceID}})
			if err != nil {
				return "", fmt.Errorf("DescribeAutoScalingInstances %s: %w", instanceID, err)
			}
			if len(res.AutoScalingInstances) == 0 {
				return "", fmt.Errorf("instance %s is in no Auto Scaling group", instanceID)
			}
			asg = aws.ToString(res.AutoScalingInstances[0].AutoScalingGroupName)
		}
		res, err := as.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{
			AutoScalingGroupName: aws.String(asg), LifecycleHookNames: []string{cfg.Lifecycle.HookName}})
		if err != nil {
			return "", fmt.Errorf("DescribeLifecycleHooks %s/%s: %w", asg, cfg.Lifecycle.HookName, err)
		}
		if len(res.LifecycleHooks) == 0 {
			return "", fmt.Errorf("group %s has no lifecycle hook %s", asg, cfg.Lifecycle.HookName)
		}
		h := res.LifecycleHooks[0]
		return fmt.Sprintf("%s on %s: %s, heartbeat timeout %d s, default result %s", cfg.Lifecycle.HookName, asg,
			aws.ToString(h.LifecycleTransition), aws.ToInt32(h.HeartbeatTimeout), aws.ToString(h.DefaultResult)), nil
	})

	s3Skip := ""
	if cfg.Results.S3.Bucket == "" {
		s3Skip = "results.s3.bucket is empty (no upload)"
	}
	check("s3", s3Skip, func(ctx context.Context) (string, error) {
		if err := hooks.NewS3Client(ctx, awsCfg, cfg.Results.S3).HeadBucket(ctx, cfg.Results.S3.Bucket); err != nil {
			return "", fmt.Errorf("HeadBucket %s: %w", cfg.Results.S3.Bucket, err)
		}
		return "bucket " + cfg.Results.S3.Bucket + " answers", nil
	})

	modelSkip := ""
	switch {
	case !cfg.Report.Enabled:
		modelSkip = "report.enabled is false"
	case cfg.Report.Provider != rootcause.ProviderOpenAI:
		modelSkip = "bedrock: the first report calls it (a model call costs tokens)"
	}
	check("model endpoint", modelSkip, func(ctx context.Context) (string, error) {
		return checkModelEndpoint(ctx, cfg.Report.Config)
	})
	// The agent's own listeners: one another process holds makes the
	// agent exit 1 right after it starts.
	out = append(out, portCheck(ctx, "admin port", "admin_addr", cfg.AdminAddr))
	if cfg.Intake.Addr != "" {
		out = append(out, portCheck(ctx, "intake port", "intake.addr", cfg.Intake.Addr))
	}
	return out
}

// portCheck is whether the agent could listen on addr (key names it in
// the config): it listens there a moment and lets go.
func portCheck(ctx context.Context, name, key, addr string) doctorCheck {
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		return doctorCheck{name: name, err: fmt.Errorf("%s %s: cannot listen (%w): another process holds it, an agent already running here or a second copy; the agent would exit 1 at start", key, addr, err)}
	}
	_ = ln.Close()
	return doctorCheck{name: name, detail: fmt.Sprintf("%s %s is free", key, addr)}
}

// checkModelEndpoint asks an OpenAI-compatible server for its models (GET
// {base_url}/models, no tokens spent) with the configured key.
func checkModelEndpoint(ctx context.Context, rc rootcause.Config) (string, error) {
	u := strings.TrimSuffix(rc.BaseURL, "/") + "/models"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	if rc.APIKeyEnv != "" {
		key := os.Getenv(rc.APIKeyEnv)
		if key == "" {
			return "", fmt.Errorf("report.api_key_env: environment variable %s is not set", rc.APIKeyEnv)
		}
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", u, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", u, res.Status)
	}
	if rc.Model != "" && !strings.Contains(string(body), `"`+rc.Model+`"`) {
		return "", fmt.Errorf("GET %s: 200, but model %q is not listed", u, rc.Model)
	}
	return fmt.Sprintf("GET %s: 200, model %q listed", u, rc.Model), nil
}
