package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
)

// OpenOptions are what main hands to Open.
type OpenOptions struct {
	Logger  *slog.Logger
	Version string
	// Hostname is the instance id of last resort; "" = os.Hostname.
	Hostname string
}

// Embedded reports whether cfg runs without AWS and Redis.
func (c Config) Embedded() bool {
	return c.Queue.URL == "" && !c.hasRedis()
}

// hasRedis reports whether cfg names a Redis for state and the limiter.
func (c Config) hasRedis() bool { return c.Redis.URL != "" || len(c.Redis.Addrs) > 0 }

func (c Config) needsAWS() bool {
	return c.Queue.URL != "" || c.Lifecycle.Has(lifecycle.SourceIMDS) || c.Lifecycle.Has(lifecycle.SourceSQS) || c.CloudWatch.Enabled
}

// NewRedisClient builds the go-redis client for cfg: a URL, or cluster or
// sentinel seeds. Calls honour context deadlines, so redis.timeout bounds
// every limiter decision.
func NewRedisClient(cfg RedisConfig) (redis.UniversalClient, error) {
	if cfg.URL != "" {
		opt, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("redis.url: %w", err)
		}
		opt.ContextTimeoutEnabled = true
		opt.DialTimeout = 2 * time.Second
		return redis.NewClient(opt), nil
	}
	if len(cfg.Addrs) == 0 {
		return nil, nil
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 cfg.Addrs,
		MasterName:            cfg.MasterName,
		ContextTimeoutEnabled: true,
		DialTimeout:           2 * time.Second,
	}), nil
}

// Open builds an Agent and its collaborators from cfg: the SQS queue or the
// embedded one, Redis or in-memory state, the limiter, lifecycle sources
// and CloudWatch. close releases what Open opened.
func Open(ctx context.Context, cfg Config, o OpenOptions) (a *Agent, closeFn func(), err error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var closers []func()
	closeFn = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeFn()
		}
	}()

	var awsCfg aws.Config
	if cfg.needsAWS() {
		opts := []func(*awsconfig.LoadOptions) error{}
		if cfg.Lifecycle.Has(lifecycle.SourceIMDS) {
			opts = append(opts, awsconfig.WithEC2IMDSRegion())
		}
		awsCfg, err = awsconfig.LoadDefaultConfig(ctx, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("aws config: %w", err)
		}
	}
	var imdsClient *imds.Client
	if cfg.Lifecycle.Has(lifecycle.SourceIMDS) {
		imdsClient = imds.NewFromConfig(awsCfg)
	}
	instanceID := cfg.InstanceID
	if instanceID == "" && imdsClient != nil {
		ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
		out, ierr := imdsClient.GetMetadata(ictx, &imds.GetMetadataInput{Path: "instance-id"})
		cancel()
		if ierr == nil {
			b := new(strings.Builder)
			_, _ = fmt.Fprint(b, readAll(out))
			instanceID = strings.TrimSpace(b.String())
		} else {
			log.Warn("instance id from IMDS failed; using the hostname", "err", ierr)
		}
	}
	if instanceID == "" {
		instanceID = o.Hostname
		if instanceID == "" {
			instanceID, _ = os.Hostname()
		}
	}

	var src queue.Source
	if cfg.Queue.URL == "" {
		src = queue.NewMemory(queue.MemoryOptions{Visibility: cfg.Queue.VisibilityTimeout, Wait: cfg.Queue.WaitTime})
	} else {
		sqsSrc := queue.NewSQS(sqs.NewFromConfig(awsCfg), queue.SQSOptions{
			QueueURL: cfg.Queue.URL, DLQURL: cfg.Queue.DLQURL, WaitTime: cfg.Queue.WaitTime,
			VisibilityTimeout: cfg.Queue.VisibilityTimeout, Logger: log.With("component", "queue"),
		})
		src = sqsSrc
	}
	closers = append(closers, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = src.Close(cctx)
	})

	rc, err := NewRedisClient(cfg.Redis)
	if err != nil {
		return nil, nil, err
	}
	var store state.Store
	var backend limiter.Backend
	if rc == nil {
		store = state.NewMemory(state.MemoryOptions{})
		backend = limiter.NewMemory()
	} else {
		closers = append(closers, func() { _ = rc.Close() })
		store = state.NewRedis(rc, state.RedisOptions{Prefix: cfg.Redis.Prefix})
		backend = limiter.NewRedis(rc, cfg.Redis.Prefix)
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if perr := rc.Ping(pctx).Err(); perr != nil {
			log.Warn("redis not answering at start; limiter rules apply their fail mode until it does", "err", perr)
		}
		cancel()
	}
	lim, err := limiter.New(cfg.Limiter.Config, backend, limiter.Options{
		Registerer: reg, Logger: log.With("component", "limiter"), Timeout: cfg.Redis.Timeout,
	})
	if err != nil {
		return nil, nil, err
	}

	d := Deps{Source: src, Store: store, Limiter: lim, InstanceID: instanceID, Version: o.Version,
		Logger: log, Registry: reg, ASGName: cfg.Lifecycle.ASGName}
	if cfg.Lifecycle.Has(lifecycle.SourceIMDS) || cfg.Lifecycle.Has(lifecycle.SourceSQS) {
		ld := lifecycle.Deps{
			// One attempt per call: the Actor retries with its own backoff,
			// bounded by the next heartbeat's due time; the SDK's retries
			// (3 attempts, jittered backoff of seconds) would sleep past it.
			AutoScaling: autoscaling.NewFromConfig(awsCfg, func(o *autoscaling.Options) {
				o.Retryer = retry.AddWithMaxAttempts(o.Retryer, 1)
			}),
			InstanceID: instanceID,
			Logger:     log, // Watcher and Actor add component=lifecycle themselves
			Registerer: reg,
		}
		if imdsClient != nil {
			ld.IMDS = imdsClient
		}
		if cfg.Lifecycle.Has(lifecycle.SourceSQS) {
			ld.SQS = sqs.NewFromConfig(awsCfg)
		}
		w, werr := lifecycle.NewWatcher(cfg.Lifecycle, ld)
		if werr != nil {
			return nil, nil, werr
		}
		d.Watcher = w
		d.Actor = lifecycle.NewActor(cfg.Lifecycle, ld)
	}
	if cfg.CloudWatch.Enabled {
		d.CloudWatch = cloudwatch.NewFromConfig(awsCfg)
	}
	a, err = New(cfg, d)
	if err != nil {
		return nil, nil, err
	}
	return a, closeFn, nil
}

func readAll(out *imds.GetMetadataOutput) string {
	if out == nil || out.Content == nil {
		return ""
	}
	defer out.Content.Close()
	var sb strings.Builder
	buf := make([]byte, 256)
	for {
		n, err := out.Content.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}
