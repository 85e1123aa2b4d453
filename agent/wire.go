package agent

import (
	"context"
	"github.com/autodiag/autodiag/agent/launch"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/alert/listener"
	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
)

// OpenOptions are what main hands to Open (open.Options).
type OpenOptions = open.Options

// redisConns is the agent's connections to Redis (per node) for workers
// workers: one call at a time each, four for the rest (the heartbeat,
// the lifecycle hand-off's blocking read and the CLIENT UNBLOCK that ends
// it, the notification and report loops) and the admin API's turns
// (admin.RedisCalls). A caller finding them busy waits, within its
// deadline, for one to come free.
func redisConns(workers int) int { return max(workers, 1) + 4 + admin.RedisCalls }

// Open builds an Agent and its collaborators from cfg: the SQS queue or the
// embedded one, Redis or in-memory state, the limiter, lifecycle sources
// and CloudWatch. close releases what Open opened.
func Open(ctx context.Context, cfg config.Config, o OpenOptions) (a *Agent, closeFn func(), err error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var closers []func()
	// closeAll, not the named result: an error return sets that to nil.
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()

	var awsCfg aws.Config
	if cfg.NeedsAWS() {
		if awsCfg, err = open.AWS(ctx, cfg); err != nil {
			return nil, nil, err
		}
	}
	var imdsClient *imds.Client
	if cfg.Lifecycle.Has(lifecycle.SourceIMDS) {
		imdsClient = imds.NewFromConfig(awsCfg)
	}
	var discoverWith *aws.Config
	if cfg.NeedsAWS() {
		discoverWith = &awsCfg
	}
	instanceID, err := open.InstanceID(ctx, cfg, discoverWith, o, log)
	if err != nil {
		return nil, nil, err
	}

	var src queue.Source
	var reach launch.Reachable // the SQS queue's, for the launch check
	var alertSender alert.Sender
	if cfg.Queue.URL == "" {
		src = queue.NewMemory(queue.MemoryOptions{Visibility: cfg.Queue.VisibilityTimeout, Wait: cfg.Queue.WaitTime})
	} else {
		sqsClient := sqs.NewFromConfig(awsCfg)
		qlog := log.With("component", "queue")
		sqsSrc := queue.NewSQS(sqsClient, queue.SQSOptions{
			QueueURL: cfg.Queue.URL, DLQURL: cfg.Queue.DLQURL, WaitTime: cfg.Queue.WaitTime,
			VisibilityTimeout: cfg.Queue.VisibilityTimeout, Logger: qlog,
			// SQS can still answer a poll abandoned after its grace, before
			// it sees the connection close: said, so that a task back only
			// after its visibility timeout is explained.
			OnGraceDecided: func(begun bool) {
				if !begun {
					qlog.Info("task poll abandoned as intake stopped; messages SQS gave it come back after their visibility timeout")
				}
			},
		})
		src, reach = sqsSrc, sqsSrc
		alertSender = listener.NewSQSSender(sqsClient, cfg.Queue.URL)
	}
	closers = append(closers, func() {
		// Closing runs after ctx may have ended; it keeps ctx's values only.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = src.Close(cctx)
	})

	rc, redisCfg, closeRedis, err := open.Redis(ctx, cfg, awsCfg, redisConns(cfg.Workers), reg, log)
	if err != nil {
		return nil, nil, err
	}
	closers = append(closers, closeRedis)
	var store state.Store
	var backend limiter.Backend
	var outbox notify.Outbox // nil = in memory
	if rc == nil {
		store = state.NewMemory(state.MemoryOptions{})
		backend = limiter.NewMemory()
	} else {
		store = state.NewRedis(rc, state.RedisOptions{Prefix: cfg.Redis.Prefix, AuditShards: cfg.Redis.AuditShards, InstanceShards: cfg.Redis.InstanceShards,
			InService: inServiceKeys(cfg.Redis.Prefix, cfg.Limiter.UsesPercent())})
		backend = limiter.NewRedis(rc, cfg.Redis.Prefix)
		outbox = notify.NewRedisOutbox(rc, notify.RedisOptions{Prefix: cfg.Redis.Prefix, ClaimIdle: cfg.NotifyClaimIdle,
			MaxLen: int64(cfg.NotifyOutboxMax)})
	}
	place := findPlacement(ctx, cfg, discoverWith, instanceID, log)
	stopTracing, err := open.Tracing(ctx, cfg, o.LookupEnv, reg, log, o.Version, instanceID, awsCfg.Region, place.asg)
	if err != nil {
		return nil, nil, &open.TracingError{Err: err}
	}
	closers = append(closers, stopTracing)
	lim, err := limiter.New(cfg.Limiter.Config, backend, limiter.Options{
		Registerer: reg, Logger: log.With("component", "limiter"), Timeout: cfg.Redis.Timeout,
		ASG: place.asg, AZ: place.az,
	})
	if err != nil {
		return nil, nil, err
	}

	// The operator's names first: the first name is the canonical one.
	hostNames := append(slices.Clone(cfg.HostNames), learnHostNames(ctx, discoverWith, instanceID, o.Hostname, log)...)
	var server func(context.Context) (open.ServerClients, error)
	if rc != nil {
		server = open.RedisServerClients(rc)
	}
	d := Deps{Source: src, Queue: reach, Store: store, Limiter: lim, RedisServer: server, InstanceID: instanceID, Version: o.Version,
		Logger: log, Registry: reg, ASGName: place.asg, AZ: place.az, AlertSender: alertSender,
		Outbox: outbox, LookupEnv: o.LookupEnv, Hostname: open.Hostname(o, log), HostNames: hostNames,
		OriginKey: open.OriginKey(o.LookupEnv, redisCfg, log)}
	if rc != nil {
		d.Feedback = feedback.NewRedis(rc, cfg.Redis.Prefix, 0)
		d.Resolutions = resolution.NewRedis(rc, cfg.Redis.Prefix)
		d.Approvals = approval.NewRedis(rc, cfg.Redis.Prefix)
	}
	if cfg.NeedsActor() {
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
			if store.Handoff != nil {
				ld.Handoff = noticeHandoff{store.Handoff}
			}
		}
		if cfg.Lifecycle.Has(lifecycle.SourceIMDS) || cfg.Lifecycle.Has(lifecycle.SourceSQS) {
			w, werr := lifecycle.NewWatcher(cfg.Lifecycle, ld)
			if werr != nil {
				return nil, nil, werr
			}
			d.Watcher = w
		}
		d.Actor = lifecycle.NewActor(cfg.Lifecycle, ld)
	}
	if cfg.CloudWatch.Enabled {
		d.CloudWatch = cloudwatch.NewFromConfig(awsCfg)
	}
	if cfg.Results.S3.Enabled() {
		d.S3 = hooks.NewS3Client(ctx, awsCfg, cfg.Results.S3)
	}
	if cfg.Report.Enabled {
		if d.Reports, err = hooks.OpenReportParts(cfg, awsCfg, rc, o.LookupEnv); err != nil {
			return nil, nil, err
		}
	}
	a, err = New(cfg, d) //nolint:contextcheck // the validator's owned-address lookup has no caller context: bounded by redis.timeout
	if err != nil {
		return nil, nil, err
	}
	return a, closeAll, nil
}
