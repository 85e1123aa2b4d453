package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
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

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/alert/listener"
	"github.com/autodiag/autodiag/agent/approval"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/instance"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/secret"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
)

// OpenOptions are what main hands to Open.
type OpenOptions struct {
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

// loadAWS loads the SDK configuration for cfg: the default chain, with the
// region from instance metadata when the imds source is on.
func loadAWS(ctx context.Context, cfg config.Config) (aws.Config, error) {
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
func ResolveInstanceID(ctx context.Context, cfg config.Config, o OpenOptions) (string, error) {
	var awsCfg *aws.Config
	if cfg.InstanceID == "" && cfg.NeedsAWS() {
		// Not loadAWS: instance metadata needs no region, and asking for
		// it would be one more call that can fail before discovery.
		c, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return "", fmt.Errorf("aws config: %w", err)
		}
		awsCfg = &c
	}
	return resolveInstanceID(ctx, cfg, awsCfg, o, orDiscard(o.Logger))
}

// resolveInstanceID asks instance metadata only when AWS is configured
// (strict IMDSv2: a session token first, no unauthenticated fallback), then
// the files package instance reads.
func resolveInstanceID(ctx context.Context, cfg config.Config, awsCfg *aws.Config, o OpenOptions, log *slog.Logger) (string, error) {
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
func hostname(o OpenOptions, log *slog.Logger) string {
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

// RedisLogger routes go-redis's own log lines (dial failures, pool
// trouble during an outage) into slog, so stderr stays one JSON object a
// line. Install it with redis.SetLogger, once per process: go-redis keeps
// one logger for all clients.
type RedisLogger struct{ Logger *slog.Logger }

// Printf logs one go-redis message as a warning; its text is in detail.
func (l RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.Logger.WarnContext(ctx, "redis client", "detail", strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// NewRedisClient builds the go-redis client for cfg: a URL, or cluster or
// sentinel seeds.
//
// A call's context bounds its wait for a connection (the pool's turn, a
// dial, a retry's backoff), not its read: go-redis closes a connection
// whose read it cuts (the reply could still come), and against a slow
// Redis each call that ran out of time would cost a connection, and its
// replacement a dial and a HELLO, which slow Redis further. A read or
// write waits up to redisIOTimeout instead, so a late reply is read and
// its connection goes back to the pool. The callers bound by redis.timeout
// (the limiter, the state store) stop waiting at their deadline and leave
// the reply to be read (internal/rediswait).
//
// conns bounds the connections (per node), so the commands in flight: a
// call that finds every connection busy waits for one within its deadline
// and sends nothing when none comes free. Against a slow Redis, the calls
// given up on keep their connections until their replies come, and the
// agent adds no more than conns commands to Redis's backlog, instead of a
// connection more for each call. 0 is go-redis's default (10 per CPU),
// for a one-shot command. Pipelines count in the same bound: go-redis
// (v9.23.0) gives pipelines a pool of their own, 10 connections per
// node beside PoolSize with 256 KiB of buffers each, which the agent
// turns off (PipelinePoolSize -1). A new connection costs one round trip
// before its first command: HELLO, without CLIENT SETINFO.
func NewRedisClient(cfg config.RedisConfig, conns int) (redis.UniversalClient, error) {
	ioTimeout := redisIOTimeout(cfg.Timeout)
	if cfg.URL != "" {
		opt, err := redis.ParseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("redis.url: %w", err)
		}
		opt.ContextTimeoutEnabled = false
		opt.ReadTimeout, opt.WriteTimeout = ioTimeout, ioTimeout
		opt.DialTimeout = 2 * time.Second
		opt.DisableIdentity = true
		if opt.PoolSize == 0 { // unless the URL says (pool_size)
			opt.PoolSize = conns
		}
		if opt.PipelinePoolSize == 0 { // unless the URL says (pipeline_pool_size)
			opt.PipelinePoolSize = -1
		}
		return redis.NewClient(opt), nil
	}
	if len(cfg.Addrs) == 0 {
		return nil, nil
	}
	return redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:            cfg.Addrs,
		MasterName:       cfg.MasterName,
		ReadTimeout:      ioTimeout,
		WriteTimeout:     ioTimeout,
		DialTimeout:      2 * time.Second,
		DisableIdentity:  true,
		PoolSize:         conns,
		PipelinePoolSize: -1,
	}), nil
}

// redisConns is the agent's connections to Redis (per node) for workers
// workers: one call at a time each, four for the rest (the heartbeat,
// the lifecycle hand-off's blocking read and the CLIENT UNBLOCK that ends
// it, the notification and report loops) and the admin API's turns
// (adminRedisCalls). A caller finding them busy waits, within its
// deadline, for one to come free.
func redisConns(workers int) int { return max(workers, 1) + 4 + adminRedisCalls }

// redisIOTimeout bounds a Redis read or write: ten times redis.timeout
// (2 s by default), a wait no reply takes from a Redis that is merely
// slow. Past it the connection is taken for broken and closed.
func redisIOTimeout(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = config.DefaultRedisTimeout
	}
	return 10 * timeout
}

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
		if awsCfg, err = loadAWS(ctx, cfg); err != nil {
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
	instanceID, err := resolveInstanceID(ctx, cfg, discoverWith, o, log)
	if err != nil {
		return nil, nil, err
	}

	var src queue.Source
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
		src = sqsSrc
		alertSender = listener.NewSQSSender(sqsClient, cfg.Queue.URL)
	}
	closers = append(closers, func() {
		// Closing runs after ctx may have ended; it keeps ctx's values only.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = src.Close(cctx)
	})

	redisCfg := cfg.Redis
	if redisCfg.URLSecret != "" {
		if redisCfg.URL, err = redisURLFromSecret(ctx, redisCfg.URLSecret, awsCfg); err != nil {
			return nil, nil, err
		}
		redisCfg.URLSecret = ""
		log.Info("redis URL read from its secret", "url_secret", cfg.Redis.URLSecret)
	}
	rc, err := NewRedisClient(redisCfg, redisConns(cfg.Workers))
	if err != nil {
		return nil, nil, err
	}
	watchRedisConns(rc, reg)
	var store state.Store
	var backend limiter.Backend
	var outbox notify.Outbox // nil = in memory
	if rc == nil {
		store = state.NewMemory(state.MemoryOptions{})
		backend = limiter.NewMemory()
	} else {
		closers = append(closers, func() { _ = rc.Close() })
		store = state.NewRedis(rc, state.RedisOptions{Prefix: cfg.Redis.Prefix, AuditShards: cfg.Redis.AuditShards, InstanceShards: cfg.Redis.InstanceShards,
			InService: inServiceKeys(cfg.Redis.Prefix, cfg.Limiter.UsesPercent())})
		backend = limiter.NewRedis(rc, cfg.Redis.Prefix)
		outbox = notify.NewRedisOutbox(rc, notify.RedisOptions{Prefix: cfg.Redis.Prefix, ClaimIdle: cfg.NotifyClaimIdle,
			MaxLen: int64(cfg.NotifyOutboxMax)})
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if perr := rc.Ping(pctx).Err(); perr != nil {
			log.Warn("redis not answering at start; limiter rules apply their fail mode until it does", "err", perr)
		}
		cancel()
	}
	place := findPlacement(ctx, cfg, discoverWith, instanceID, log)
	stopTracing, err := openTracing(ctx, cfg, o.LookupEnv, reg, log, o.Version, instanceID, awsCfg.Region, place.asg)
	if err != nil {
		return nil, nil, &TracingError{Err: err}
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
	var server func(context.Context) (serverClients, error)
	if rc != nil {
		server = redisServerClients(rc)
	}
	d := Deps{Source: src, Store: store, Limiter: lim, RedisServer: server, InstanceID: instanceID, Version: o.Version,
		Logger: log, Registry: reg, ASGName: place.asg, AZ: place.az, AlertSender: alertSender,
		Outbox: outbox, LookupEnv: o.LookupEnv, Hostname: hostname(o, log), HostNames: hostNames,
		OriginKey: originKey(o.LookupEnv, redisCfg, log)}
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
			if rs, ok := store.(*state.Redis); ok {
				ld.Handoff = noticeHandoff{rs}
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

// secretTimeout bounds fetching redis.url_secret at start, the SDK's
// retries included: long enough for a slow regional endpoint, short
// enough that a missing grant fails the start instead of hanging it.
const secretTimeout = 15 * time.Second

// originKey is the key the fleet's agents sign and verify investigation
// origins with (task.SignOrigin): from AUTODIAG_ORIGIN_KEY when set, else
// from the Redis settings every agent of the fleet shares, the URL's
// password included (whoever knows it can write task records directly,
// so it grants nothing more); nil without either, and New makes a key of
// its own (embedded mode: one agent signs and verifies).
func originKey(lookup func(string) (string, bool), rc config.RedisConfig, log *slog.Logger) []byte {
	if lookup != nil {
		if v, ok := lookup(task.OriginKeyEnv); ok && v != "" {
			return task.DeriveOriginKey(v)
		}
	}
	if rc.URL == "" && len(rc.Addrs) == 0 {
		return nil
	}
	if !hasPassword(rc.URL) {
		log.Warn("the key of investigation origins comes from Redis settings without a password: set " + task.OriginKeyEnv +
			" on every agent so that no task sender can guess it")
	}
	return task.DeriveOriginKey(strings.Join(append([]string{rc.URL, rc.MasterName, rc.Prefix}, rc.Addrs...), "\n"))
}

func hasPassword(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return false
	}
	p, ok := u.User.Password()
	return ok && p != ""
}

// redisURLFromSecret reads the Redis URL that ref names with the instance
// role. Its errors never contain the value: it holds the password.
func redisURLFromSecret(ctx context.Context, ref string, awsCfg aws.Config) (string, error) {
	sctx, cancel := context.WithTimeout(ctx, secretTimeout)
	defer cancel()
	u, err := secret.Fetch(sctx, ref, secret.NewClients(ctx, awsCfg))
	if err != nil {
		return "", fmt.Errorf("redis.url_secret: %w", err)
	}
	u = strings.TrimSpace(u)
	// redis.ParseURL's errors quote the URL; only the verdict is kept.
	if _, perr := redis.ParseURL(u); perr != nil {
		return "", fmt.Errorf("redis.url_secret: the value of %s is not a valid redis:// or rediss:// URL (not shown: it holds the password)", ref)
	}
	return u, nil
}
