package open

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/secret"
	"github.com/autodiag/autodiag/agent/task"
)

// RedisLogger routes go-redis's own log lines (dial failures, pool
// trouble during an outage) into slog, so stderr stays one JSON object a
// line. Install it with redis.SetLogger, once per process: go-redis keeps
// one logger for all clients.
type RedisLogger struct{ Logger *slog.Logger }

// Printf logs one go-redis message as a warning; its text is in detail.
func (l RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.Logger.WarnContext(ctx, "redis client", "detail", strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// RedisClient builds the go-redis client for cfg: a URL, or cluster or
// sentinel seeds.
//
// A call's context bounds its wait for a connection (the pool's turn, a
// dial, a retry's backoff), not its read: go-redis closes a connection
// whose read it cuts (the reply could still come), and against a slow
// Redis each call that ran out of time would cost a connection, and its
// replacement a dial and a HELLO, which slow Redis further. A read or
// write waits up to IOTimeout instead, so a late reply is read and
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
func RedisClient(cfg config.RedisConfig, conns int) (redis.UniversalClient, error) {
	ioTimeout := IOTimeout(cfg.Timeout)
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

// IOTimeout bounds a Redis read or write: ten times redis.timeout
// (2 s by default), a wait no reply takes from a Redis that is merely
// slow. Past it the connection is taken for broken and closed.
func IOTimeout(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = config.DefaultRedisTimeout
	}
	return 10 * timeout
}

// secretTimeout bounds fetching redis.url_secret at start, the SDK's
// retries included: long enough for a slow regional endpoint, short
// enough that a missing grant fails the start instead of hanging it.
const secretTimeout = 15 * time.Second

// OriginKey is the key the fleet's agents sign and verify investigation
// origins with (task.SignOrigin): from AUTODIAG_ORIGIN_KEY when set, else
// from the Redis settings every agent of the fleet shares, the URL's
// password included (whoever knows it can write task records directly,
// so it grants nothing more); nil without either, and New makes a key of
// its own (embedded mode: one agent signs and verifies).
func OriginKey(lookup func(string) (string, bool), rc config.RedisConfig, log *slog.Logger) []byte {
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

// RedisURLFromSecret reads the Redis URL that ref names with the instance
// role. Its errors never contain the value: it holds the password.
func RedisURLFromSecret(ctx context.Context, ref string, awsCfg aws.Config) (string, error) {
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

// Redis opens the agent's Redis client for cfg.Redis with conns
// connections per node (its URL read from redis.url_secret through awsCfg
// when set), counts its connections on reg (at 0 without Redis, whose
// client is then nil), and says at once when Redis does not answer. It
// returns the settings it opened (the URL read from its secret: the
// fleet's origin key derives from them) and a closer that closes the
// client, a no-op without Redis.
func Redis(ctx context.Context, cfg config.Config, awsCfg aws.Config, conns int, reg prometheus.Registerer, log *slog.Logger) (
	rc redis.UniversalClient, rcfg config.RedisConfig, closeFn func(), err error) {
	rcfg = cfg.Redis
	if rcfg.URLSecret != "" {
		if rcfg.URL, err = RedisURLFromSecret(ctx, rcfg.URLSecret, awsCfg); err != nil {
			return nil, rcfg, nil, err
		}
		rcfg.URLSecret = ""
		log.Info("redis URL read from its secret", "url_secret", cfg.Redis.URLSecret)
	}
	if rc, err = RedisClient(rcfg, conns); err != nil {
		return nil, rcfg, nil, err
	}
	WatchRedisConns(rc, reg)
	if rc == nil {
		return nil, rcfg, func() {}, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if perr := rc.Ping(pctx).Err(); perr != nil {
		log.Warn("redis not answering at start; limiter rules apply their fail mode until it does", "err", perr)
	}
	return rc, rcfg, func() { _ = rc.Close() }, nil
}
