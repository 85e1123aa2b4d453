package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/instance"
	"github.com/autodiag/autodiag/agent/internal/urlcheck"
	"github.com/autodiag/autodiag/agent/notify"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/secret"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/tracing"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/configerr"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
)

// Config is the whole configuration file (README "Configuration").
// Every field has a default (DefaultConfig); a file overrides what it
// names, AUTODIAG_* variables override the common keys (Env).
type Config struct {
	// InstanceID names this agent; empty = discovered at start. With the
	// sqs or imds lifecycle source it must be the EC2 instance id.
	InstanceID string `yaml:"instance_id"`
	// AdminAddr is the admin HTTP listener; loopback by default. Beyond
	// loopback it needs AdminAuth.
	AdminAddr string `yaml:"admin_addr"`
	// AdminAuth names the credentials every admin request but GET
	// /healthz and GET /readyz must carry (the alert listener's auth shape); unset
	// = none, which only a loopback admin_addr may have.
	AdminAuth alert.AuthConfig `yaml:"admin_auth"`
	// LogLevel is debug, info (default), warn or error.
	LogLevel string `yaml:"log_level"`
	// Workers is how many tasks run at once (default 4).
	Workers     int                 `yaml:"workers"`
	Queue       QueueConfig         `yaml:"queue"`
	Redis       RedisConfig         `yaml:"redis"`
	Diagnostics []runner.Diagnostic `yaml:"diagnostics"`
	// Catalog says how strictly the diagnostics are checked.
	Catalog CatalogConfig `yaml:"catalog"`
	Limiter LimiterConfig `yaml:"limiter"`
	// LifecycleSection is embedded so that cfg.Lifecycle and cfg.Drain
	// name the two packages' settings the section holds.
	LifecycleSection `yaml:"lifecycle"`
	CloudWatch       CloudWatchConfig `yaml:"cloudwatch"`
	// Intake is the intake: section: the alert listener, which alerting
	// systems post to; off by default.
	Intake alert.ListenerConfig `yaml:"intake"`
	// Routes decide which alerts become which tasks, on the alert
	// listener and on the task queue (CloudWatch alarms); none = every
	// alert is ignored (no_route).
	Routes alert.Routes `yaml:"routes"`
	// Results says what happens to a diagnostic's output once it ran
	// (redaction, the upload to S3); each diagnostic's max_output bounds
	// what the record keeps.
	Results ResultsConfig `yaml:"results"`
	// Redact adds values to redact beside results.redact's rules
	// (redact.values_env).
	Redact RedactSection `yaml:"redact"`
	// Notify lists the sinks told about task outcomes and drains; empty
	// = no notifications.
	Notify []notify.SinkConfig `yaml:"notify"`
	// NotifyMaxAge gives up an event not delivered by then (default 24h).
	NotifyMaxAge time.Duration `yaml:"notify_max_age"`
	// NotifyClaimIdle is how long an outbox entry stays with the agent
	// that claimed it before another may take it over (default 2m).
	NotifyClaimIdle time.Duration `yaml:"notify_claim_idle"`
	// NotifyOutboxMax caps each sink's lane of the outbox, in entries
	// (default 100000); the oldest past it are dead-lettered (outbox_full).
	NotifyOutboxMax int `yaml:"notify_outbox_max"`
	// Report is the root-cause report of finished tasks; off by default.
	Report ReportSection `yaml:"report"`
	// Tracing exports OpenTelemetry spans over OTLP/HTTP; off by default
	// (see docs/tracing.md).
	Tracing tracing.Config `yaml:"tracing"`
	// HostNames are names this agent answers for besides those it learns
	// (instance id, hostname, EC2 private DNS name and addresses): a
	// target diagnostic of a task naming one runs here. AUTODIAG_HOST_NAMES
	// (comma-separated) replaces them.
	HostNames []string `yaml:"host_names"`
	// SecretsRefresh is how often the credentials named by *_secret keys
	// are read again (0: secret.DefaultRefresh); SIGHUP reads them at once.
	SecretsRefresh time.Duration `yaml:"secrets_refresh"`
}

// SecretRefs are the references of every credential the agent reads
// from a secret store and refreshes while it runs (not redis.url_secret,
// read once at start: a new Redis URL needs a restart).
func (c Config) SecretRefs() []string {
	refs := c.AdminAuth.SecretRefs()
	refs = append(refs, c.Intake.Auth.SecretRefs()...)
	if c.Intake.Slack.SigningSecretSecret != "" {
		refs = append(refs, c.Intake.Slack.SigningSecretSecret)
	}
	refs = append(refs, notify.SecretRefs(c.Notify)...)
	if c.Report.Enabled && c.Report.APIKeySecret != "" {
		refs = append(refs, c.Report.APIKeySecret)
	}
	if c.Tracing.HeadersSecret != "" {
		refs = append(refs, c.Tracing.HeadersSecret)
	}
	return refs
}

// SecretsRefreshInterval is secrets_refresh with its default applied.
func (c Config) SecretsRefreshInterval() time.Duration {
	if c.SecretsRefresh == 0 {
		return secret.DefaultRefresh
	}
	return c.SecretsRefresh
}

// ResultsConfig is the `results:` section. The redaction keys
// (results.redact, results.redact_defaults) are the redact package's.
type ResultsConfig struct {
	Redact redact.Config `yaml:",inline"`
	// S3 is where the whole output goes (results.s3); off by default.
	S3 S3Config `yaml:"s3"`
}

// LimiterConfig is the `limiter:` section: the limiter's settings and,
// under limiter.hosts, the host allow-list that task validation applies
// before the limiter is asked. The allow-list stays under that key, which
// operators write, though the limiter does not use it.
type LimiterConfig struct {
	limiter.Config `yaml:",inline"`
	Hosts          task.HostsConfig `yaml:"hosts"`
}

// LifecycleSection is the `lifecycle:` section: how the agent learns of and
// completes a termination (the lifecycle package's keys) and how the work
// ends meanwhile (the drain's keys drain_timeout and queued), side by side
// under one key, which operators write.
type LifecycleSection struct {
	Lifecycle lifecycle.Config `yaml:",inline"`
	Drain     drain.Config     `yaml:",inline"`
}

// QueueConfig is the task queue.
type QueueConfig struct {
	// URL of the SQS task queue; empty = the embedded in-memory queue fed by
	// POST /v1/tasks.
	URL string `yaml:"url"`
	// WaitTime is the long poll (0..20s, default 20s).
	WaitTime time.Duration `yaml:"wait_time"`
	// BatchSize is the most messages one receive asks for (1..10, default 10).
	BatchSize int `yaml:"batch_size"`
	// VisibilityTimeout hides a received message (default 60s); it is
	// extended while the task runs.
	VisibilityTimeout time.Duration `yaml:"visibility_timeout"`
	// DLQURL receives rejected tasks with the reason; empty = leave them to
	// the queue's redrive policy.
	DLQURL string `yaml:"dlq_url"`
	// MaxAge: tasks created longer ago end as stale (default 1h).
	MaxAge time.Duration `yaml:"max_age"`
	// TargetWait is how long a target task whose host no live agent owns
	// waits for one (an instance may be booting) before it ends rejected
	// with reason no_agent_for_host (default 2m; 0 = at once).
	TargetWait time.Duration `yaml:"target_wait"`
}

// RedisConfig is the shared state store.
type RedisConfig struct {
	// URL is redis:// or rediss://; empty (and no Addrs or URLSecret) =
	// in-memory state.
	URL string `yaml:"url"`
	// URLSecret names where the agent reads the URL at start, so no
	// password sits in the file or user data: a Secrets Manager secret ARN,
	// or an SSM SecureString parameter name or ARN. Instead of URL.
	URLSecret string `yaml:"url_secret"`
	// Addrs are cluster or sentinel seeds, instead of URL.
	Addrs []string `yaml:"addrs"`
	// MasterName selects Sentinel mode with Addrs.
	MasterName string `yaml:"master_name"`
	// Prefix of every key (default "autodiag:").
	Prefix string `yaml:"prefix"`
	// Timeout bounds each call (default 200ms); past it the limiter rule's
	// fail mode applies to decisions and StateFail to task state.
	Timeout time.Duration `yaml:"timeout"`
	// StateFail is what a task does when its state (claim, record) cannot
	// be read or written in Timeout: StateFailOpen (default) runs it with
	// the queue's visibility as the only guard against a second run;
	// StateFailClosed releases it to be retried later.
	StateFail string `yaml:"state_fail"`
	// AuditShards spreads the audit stream over that many streams
	// (<prefix>audit:{0} … audit:{N-1}, by task id) instead of the one
	// <prefix>audit (1, the default): for fleets where one stream taking
	// an XADD per task of every agent is a hot key (see
	// docs/configuration.md). Every agent and reader of one fleet must use
	// the same value.
	AuditShards int `yaml:"audit_shards"`
	// InstanceShards spreads the instance index over that many sorted sets
	// (<prefix>instances:{0} … instances:{N-1}, by instance id) instead of
	// the one <prefix>instances (1, the default), which every agent writes
	// at every heartbeat. Every agent and reader of one fleet must use the
	// same value.
	InstanceShards int `yaml:"instance_shards"`
}

// MaxAuditShards bounds redis.audit_shards and redis.instance_shards: a
// reader asks every shard.
const MaxAuditShards = 64

// Values of redis.state_fail.
const (
	StateFailOpen   = "open"
	StateFailClosed = "closed"
)

// CloudWatchConfig controls the DrainSeconds metric for stuck-drain alarms.
type CloudWatchConfig struct {
	Enabled   bool   `yaml:"enabled"`
	Namespace string `yaml:"namespace"` // default "autodiag"
	// Interval is the period of DrainSeconds and LimiterDegraded; zero
	// means DefaultCloudWatchInterval. At most a minute, the period of
	// the alarms that read them.
	Interval time.Duration `yaml:"interval"`
}

// Defaults of the agent's own keys; the sections of the leaf packages
// (limiter, lifecycle, drain, runner) keep theirs beside their types.
const (
	DefaultAdminAddr         = "127.0.0.1:9464"
	DefaultLogLevel          = "info"
	DefaultWorkers           = 4
	DefaultWaitTime          = 20 * time.Second
	DefaultBatchSize         = 10
	DefaultVisibilityTimeout = 60 * time.Second
	DefaultMaxAge            = time.Hour
	DefaultTargetWait        = 2 * time.Minute
	DefaultRedisPrefix       = "autodiag:"
	DefaultRedisTimeout      = 200 * time.Millisecond
	DefaultStateFail         = StateFailOpen
	DefaultNamespace         = "autodiag"
	// DefaultCloudWatchInterval is the period of the CloudWatch metrics.
	DefaultCloudWatchInterval = time.Minute
)

// Bounds the agent's own keys are checked against.
const (
	maxWorkers           = 256
	maxWaitTime          = 20 * time.Second // SQS long poll
	maxBatchSize         = 10               // SQS ReceiveMessage
	minVisibilityTimeout = 2 * time.Second
	maxVisibilityTimeout = 12 * time.Hour // SQS
	maxRedisTimeout      = 30 * time.Second
	// maxCloudWatchInterval is the alarms' period: a longer interval
	// leaves alarm periods without data, which does not breach.
	maxCloudWatchInterval = time.Minute
)

// DefaultConfig is the embedded configuration `autodiag run` uses with no
// file: in-memory queue and state, a small read-only catalog, signal-only
// lifecycle, a permissive host allow-list (syntax is still enforced) and one
// limiter rule so a runaway alert cannot flood a host.
func DefaultConfig() Config {
	lim := LimiterConfig{Config: limiter.DefaultConfig(), Hosts: task.HostsConfig{Allow: []string{`^[a-z0-9-]+(\.[a-z0-9-]+)*$`}}}
	lim.Rules = []limiter.Rule{{
		// An investigation's tool calls have their own, tighter rule: a
		// model asking in a loop cannot use the host's share of alerts.
		Name:   "investigation",
		Match:  limiter.Match{Origin: []string{task.OriginInvestigation}},
		Key:    limiter.KeyHost,
		Limits: []limiter.Limit{{Window: &limiter.Window{Count: 10, Per: 10 * time.Minute}}},
	}, {
		Name:   "default",
		Key:    limiter.KeyHostDiagnostic,
		Limits: []limiter.Limit{{Window: &limiter.Window{Count: 30, Per: time.Minute}}},
	}}
	return Config{
		AdminAddr: DefaultAdminAddr,
		LogLevel:  DefaultLogLevel,
		Workers:   DefaultWorkers,
		Queue: QueueConfig{
			WaitTime:          DefaultWaitTime,
			BatchSize:         DefaultBatchSize,
			VisibilityTimeout: DefaultVisibilityTimeout,
			MaxAge:            DefaultMaxAge,
			TargetWait:        DefaultTargetWait,
		},
		Redis:            RedisConfig{Prefix: DefaultRedisPrefix, Timeout: DefaultRedisTimeout, StateFail: DefaultStateFail, AuditShards: 1, InstanceShards: 1},
		Diagnostics:      BuiltinCatalog(),
		Limiter:          lim,
		LifecycleSection: LifecycleSection{Lifecycle: lifecycle.DefaultConfig(), Drain: drain.DefaultConfig()},
		CloudWatch:       CloudWatchConfig{Namespace: DefaultNamespace},
		Results:          ResultsConfig{S3: DefaultS3Config()},
		NotifyMaxAge:     notify.DefaultMaxAge,
		NotifyClaimIdle:  notify.DefaultClaimIdle,
		NotifyOutboxMax:  notify.DefaultMaxLen,
		Report:           ReportSection{Config: report.DefaultConfig()},
		Tracing:          tracing.DefaultConfig(),
	}
}

// BuiltinCatalog is the read-only catalog of embedded mode; a config file
// with a diagnostics list replaces it.
func BuiltinCatalog() []runner.Diagnostic {
	return []runner.Diagnostic{
		{Name: "uptime", Command: []string{"/usr/bin/uptime"}, Timeout: 10 * time.Second, MaxOutput: 4 << 10},
		{Name: "disk-usage", Command: []string{"/usr/bin/df", "-h", "{param.mount}"},
			Params: map[string]string{"mount": `/[A-Za-z0-9/_.-]*`}, Timeout: 30 * time.Second, MaxOutput: 64 << 10},
		{Name: "memory", Command: []string{"/usr/bin/free", "-m"}, Timeout: 10 * time.Second, MaxOutput: 4 << 10},
		{Name: "dns-lookup", Command: []string{"/usr/bin/getent", "ahosts", "{host}"}, Timeout: 15 * time.Second, MaxOutput: 16 << 10},
	}
}

// Load decodes a YAML file over the defaults, strictly (an unknown or
// duplicate key, a value of the wrong type or a second document is an
// error), applies the AUTODIAG_* overrides read through env (nil for none)
// and validates the result. Every problem is reported at once, as
// *ConfigErrors joined with errors.Join, each naming its key and, when the
// key is in the file, its line. Empty data means the defaults.
func Load(data []byte, env func(string) (string, bool)) (Config, error) {
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return cfg, syntaxError(data, err)
	}
	var p problems
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil && !emptyDocument(&extra):
		p.list = append(p.list, &ConfigError{Key: "config", Line: docContent(&extra).Line,
			Err: errors.New("a second YAML document: a configuration file holds one")})
	case err != nil && !errors.Is(err, io.EOF):
		p.list = append(p.list, &ConfigError{Key: "config", Err: fmt.Errorf("after the first document: %w", err)})
	}
	// A catalog past its cap is refused before it is decoded: 200,000
	// entries took 468 MB to decode and check.
	tooMany := capDiagnostics(&root, &p)
	decodeErr := decodeYAML(&root, &cfg)
	p.list = append(p.list, flatten(decodeErr)...)
	var fromEnv map[string]string
	if env != nil {
		var err error
		fromEnv, err = cfg.applyEnv(env)
		p.list = append(p.list, flatten(err)...)
	}
	// A value that could not be read keeps its default; its problem is
	// already reported, and checks of that default would only add noise.
	bad := map[string]bool{}
	for _, ce := range Problems(decodeErr) {
		bad[ce.Key] = true
	}
	bad["diagnostics"] = bad["diagnostics"] || tooMany
	for _, ce := range Problems(cfg.Validate()) {
		if bad[ce.Key] {
			continue
		}
		if name, ok := fromEnv[ce.Key]; ok {
			// The value is not the file's: say where it came from, and
			// give no line.
			ce.Line, ce.Err = lineNotInFile, fmt.Errorf("%w (set by %s)", ce.Err, name)
		}
		p.list = append(p.list, ce)
	}
	return cfg, withLines(&root, p.err())
}

// MaxDiagnostics is the most entries the catalog may hold: far more than
// any fleet's programs, few enough that loading and checking them stays
// cheap.
const MaxDiagnostics = 1000

func tooManyDiagnostics(n int) error {
	return fmt.Errorf("holds %d entries; at most %d", n, MaxDiagnostics)
}

// capDiagnostics reports, as a problem of the key diagnostics, a catalog
// of more than MaxDiagnostics entries in the file under root, and keeps
// only its first MaxDiagnostics+1 to decode (the file is refused anyway).
func capDiagnostics(root *yaml.Node, p *problems) bool {
	doc := docContent(root)
	if doc == nil || doc.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], resolve(doc.Content[i+1])
		if k.Value != "diagnostics" || v == nil || v.Kind != yaml.SequenceNode || len(v.Content) <= MaxDiagnostics {
			continue
		}
		p.list = append(p.list, &ConfigError{Key: "diagnostics", Line: k.Line, Err: tooManyDiagnostics(len(v.Content))})
		v.Content = v.Content[:MaxDiagnostics+1]
		return true
	}
	return false
}

// emptyDocument reports whether doc holds no settings ("---" alone, "~").
func emptyDocument(doc *yaml.Node) bool {
	n := docContent(doc)
	return n == nil || isNull(resolve(n))
}

// instanceIDPattern is what instance_id may hold: it becomes part of Redis
// keys and log fields.
var instanceIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Validate reports every problem of the configuration at once, as
// *ConfigErrors naming their keys. It validates each section with the
// section's own Validate and then the rules that span sections.
func (c Config) Validate() error {
	var p problems
	switch {
	case c.InstanceID == "":
	case !instanceIDPattern.MatchString(c.InstanceID):
		p.addf("instance_id", "%q must match %s", c.InstanceID, instanceIDPattern)
	case c.NeedsEC2InstanceID() && !instance.Pattern.MatchString(c.InstanceID):
		p.addf("instance_id", "%q is not an EC2 instance id (%s), which the sqs and imds lifecycle sources match notices against "+
			"and launch_hook_name is completed by: "+
			"leave it empty to discover it at start, or set the instance's id", c.InstanceID, instance.Pattern)
	}
	if host, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
		p.addf("admin_addr", "%q is not host:port: %w", c.AdminAddr, err)
	} else if !alert.Loopback(host) && !c.AdminAuth.Enabled() {
		// The admin API starts tasks and drains: anyone who reaches it
		// could.
		p.addf("admin_addr", "%q is reachable from other hosts: set admin_auth (bearer_token_env, bearer_token_secret or basic) or listen on loopback (default %s)",
			c.AdminAddr, DefaultAdminAddr)
	}
	p.adopt("admin_auth", c.AdminAuth.Validate())
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		p.addf("log_level", "must be debug, info, warn or error, not %q", c.LogLevel)
	}
	if c.Workers < 1 || c.Workers > maxWorkers {
		p.addf("workers", "must be between 1 and %d, not %d", maxWorkers, c.Workers)
	}
	p.adopt("queue", c.Queue.Validate())
	if c.Queue.URL != "" {
		// The SQS source's own bounds; those the queue section already
		// reported are not repeated.
		p.adoptNew("queue", queue.SQSOptions{QueueURL: c.Queue.URL, WaitTime: c.Queue.WaitTime, VisibilityTimeout: c.Queue.VisibilityTimeout}.Validate())
	}
	p.adopt("redis", c.Redis.Validate())
	p.adopt("", c.validateDiagnostics())
	for i, n := range c.HostNames {
		if _, err := task.NormalizeHost(n); err != nil {
			p.addf(fmt.Sprintf("host_names[%d]", i), "%q is not a host name a task could name: %w", n, err)
		}
	}
	p.adopt("limiter", c.Limiter.Validate())
	p.adopt("limiter", rulesInCatalog(c.Limiter.Rules, c.Diagnostics))
	if k := c.Limiter.Dedupe.Key; k != "" {
		if _, ok := (&task.Task{}).Field(k); !ok || k == "params." {
			p.addf("limiter.dedupe.key", "%q is not a task field (want id, host, diagnostic, severity, alert.source, alert.name, alert.event_id or params.NAME); "+
				"a typo would disable dedupe", k)
		}
	}
	p.adopt("lifecycle", c.LifecycleSection.Validate())
	if c.Lifecycle.Has(lifecycle.SourceSQS) && c.Lifecycle.QueueURL != "" && c.Lifecycle.QueueURL == c.Queue.URL {
		p.addf("lifecycle.queue_url", "must not be the task queue")
	}
	p.adopt("cloudwatch", c.CloudWatch.Validate())
	p.adopt("intake", c.Intake.Validate())
	p.adopt("routes", c.Routes.Validate())
	p.adopt("routes", c.routesInCatalog())
	p.adopt("results", c.Results.Redact.Validate())
	p.adopt("redact", c.Redact.Validate())
	p.adopt("results.s3", c.Results.S3.Validate())
	if c.Results.S3.Enabled() && c.Drain.Timeout > 0 && c.Results.S3.Timeout >= c.Drain.Timeout {
		p.addf("results.s3.timeout", "%s must be below lifecycle.drain_timeout %s: an upload runs inside the drain", c.Results.S3.Timeout, c.Drain.Timeout)
	}
	p.adopt("notify", notify.ValidateSinks(c.Notify))
	// No outbound URL may drive this agent's own admin API (/v1/drain);
	// the sections report their other URL problems themselves.
	own := [][2]string{{"report.base_url", c.Report.BaseURL}, {"tracing.endpoint", c.Tracing.Endpoint}}
	for i, n := range c.Notify {
		own = append(own, [2]string{fmt.Sprintf("notify[%d].url", i), n.URL})
	}
	for _, ku := range own {
		key, u := ku[0], ku[1]
		if u != "" && urlcheck.Check(u, urlcheck.Rules{AllowHTTP: true, AllowUserinfo: true}) == nil {
			if err := urlcheck.Check(u, urlcheck.Rules{AllowHTTP: true, AllowUserinfo: true, Self: c.AdminAddr}); err != nil {
				p.add(key, err)
			}
		}
	}
	p.adopt("", notify.ValidateMaxAge(c.NotifyMaxAge))
	p.adopt("", notify.ValidateClaimIdle(c.NotifyClaimIdle, c.Notify))
	p.adopt("", notify.ValidateOutboxMax(c.NotifyOutboxMax))
	p.adopt("report", c.Report.Validate())
	p.adopt("tracing", c.Tracing.Validate())
	if err := secret.ValidateRefresh(c.SecretsRefresh); err != nil {
		p.add("secrets_refresh", err)
	}
	return p.err()
}

// AdminCredentials reads the secret admin_auth names through getenv
// (os.LookupEnv in cmd), for the admin listener and for the CLI commands
// that call it. A named variable unset or empty is a *ConfigError naming
// its key; no admin_auth gives the zero Credentials (nothing required).
func (c Config) AdminCredentials(getenv func(string) (string, bool)) (alert.Credentials, error) {
	cr, err := c.AdminAuth.Credentials(getenv)
	var ce *ConfigError
	if errors.As(err, &ce) {
		return alert.Credentials{}, &ConfigError{Key: configerr.JoinKey("admin_auth", ce.Key), Err: ce.Err}
	}
	return cr, err
}

// Validate reports every problem of the limiter section, the limiter's
// and the allow-list's; keys are relative to it.
func (l LimiterConfig) Validate() error {
	var p problems
	p.adopt("", l.Config.Validate())
	p.adopt("hosts", l.Hosts.Validate())
	return p.err()
}

// Validate reports every problem of the lifecycle section: the lifecycle
// package's, the drain's, and whether the drain ends before the lifecycle
// action's global timeout; keys are relative to the section.
func (s LifecycleSection) Validate() error {
	var p problems
	p.adopt("", s.Lifecycle.Validate())
	p.adopt("", s.Drain.Validate())
	if s.Drain.Timeout > 0 { // else the drain's Validate has said so
		p.adopt("", s.Lifecycle.CheckDrainTimeout(s.Drain.Timeout))
	}
	return p.err()
}

// Validate reports every problem of the queue section; keys are relative
// to it.
func (q QueueConfig) Validate() error {
	var p problems
	if q.URL != "" {
		if _, err := url.ParseRequestURI(q.URL); err != nil {
			p.addf("url", "not a URL: %w", err)
		}
	}
	if q.DLQURL != "" {
		if _, err := url.ParseRequestURI(q.DLQURL); err != nil {
			p.addf("dlq_url", "not a URL: %w", err)
		}
	}
	if q.WaitTime < 0 || q.WaitTime > maxWaitTime {
		p.addf("wait_time", "must be between 0s and %s (SQS long poll), not %s", maxWaitTime, q.WaitTime)
	}
	if q.BatchSize < 1 || q.BatchSize > maxBatchSize {
		p.addf("batch_size", "must be between 1 and %d, not %d", maxBatchSize, q.BatchSize)
	}
	if q.VisibilityTimeout < minVisibilityTimeout || q.VisibilityTimeout > maxVisibilityTimeout {
		p.addf("visibility_timeout", "must be between %s and %s, not %s", minVisibilityTimeout, maxVisibilityTimeout, q.VisibilityTimeout)
	}
	if q.MaxAge < 0 {
		p.addf("max_age", "must not be negative")
	}
	if q.TargetWait < 0 {
		p.addf("target_wait", "must not be negative")
	}
	return p.err()
}

// Validate reports every problem of the redis section; keys are relative
// to it.
func (r RedisConfig) Validate() error {
	var p problems
	if r.URL != "" && len(r.Addrs) > 0 {
		p.addf("addrs", "set either redis.url or redis.addrs, not both")
	}
	if r.URL != "" && r.URLSecret != "" {
		p.addf("url_secret", "set either redis.url or redis.url_secret, not both")
	}
	if r.URLSecret != "" && len(r.Addrs) > 0 {
		p.addf("url_secret", "set either redis.url_secret or redis.addrs, not both")
	}
	if r.URL != "" {
		if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			p.addf("url", "must be a redis:// or rediss:// URL")
		}
	}
	if r.URLSecret != "" {
		if _, err := secret.ParseRef(r.URLSecret); err != nil {
			p.add("url_secret", err)
		}
	}
	for i, a := range r.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			p.addf(fmt.Sprintf("addrs[%d]", i), "%q is not host:port", a)
		}
	}
	if r.MasterName != "" && len(r.Addrs) == 0 {
		p.addf("master_name", "needs redis.addrs (the sentinels)")
	}
	if r.Timeout <= 0 || r.Timeout > maxRedisTimeout {
		p.addf("timeout", "must be between 1ms and %s, not %s", maxRedisTimeout, r.Timeout)
	}
	if r.Prefix == "" {
		p.addf("prefix", "must not be empty")
	}
	switch r.StateFail {
	case StateFailOpen, StateFailClosed:
	default:
		p.addf("state_fail", "must be %q or %q, not %q", StateFailOpen, StateFailClosed, r.StateFail)
	}
	if r.AuditShards < 1 || r.AuditShards > MaxAuditShards {
		p.addf("audit_shards", "must be between 1 and %d, not %d", MaxAuditShards, r.AuditShards)
	}
	if r.InstanceShards < 1 || r.InstanceShards > MaxAuditShards {
		p.addf("instance_shards", "must be between 1 and %d, not %d", MaxAuditShards, r.InstanceShards)
	}
	return p.err()
}

// Validate reports every problem of the cloudwatch section; keys are
// relative to it.
func (cw CloudWatchConfig) Validate() error {
	var p problems
	if cw.Enabled && cw.Namespace == "" {
		p.addf("namespace", "must be set when cloudwatch.enabled")
	}
	if cw.Interval < 0 || cw.Interval > maxCloudWatchInterval {
		p.addf("interval", "must be at most %s (the alarms' period) and not negative, not %s", maxCloudWatchInterval, cw.Interval)
	}
	return p.err()
}

// validateDiagnostics checks the catalog: each entry, names unique, no
// value placeholder inside an interpreter's program, and each entry's
// effective timeout within the drain.
func (c Config) validateDiagnostics() error {
	var p problems
	if len(c.Diagnostics) == 0 {
		p.addf("diagnostics", "the catalog is empty")
	}
	if n := len(c.Diagnostics); n > MaxDiagnostics {
		p.add("diagnostics", tooManyDiagnostics(n))
		return p.err()
	}
	drainTimeout := c.Drain.Timeout
	seen := map[string]int{}
	for i, d := range c.Diagnostics {
		key := fmt.Sprintf("diagnostics[%d]", i)
		p.adopt(key, d.Validate())
		if j, dup := seen[d.Name]; dup {
			p.addf(key+".name", "duplicate diagnostic %q (also diagnostics[%d])", d.Name, j)
		} else {
			seen[d.Name] = i
		}
		checkScripts(&p, key, d.Command)
		if c.Catalog.Strict {
			checkStrict(&p, key, d.Command)
		}
		if eff := d.WithDefaults().Timeout; drainTimeout > 0 && eff > drainTimeout {
			how := eff.String()
			if d.Timeout == 0 {
				how = fmt.Sprintf("not set, so the default %s applies, which", eff)
			}
			p.addf(key+".timeout", "%s exceeds lifecycle.drain_timeout %s: a drain would always cut it short", how, drainTimeout)
		}
		if eff := d.WithDefaults().ApprovalTimeout; eff > 0 && eff <= runner.MaxApprovalTimeout && c.Queue.MaxAge > 0 && eff >= c.Queue.MaxAge {
			// The wait counts against the task's age: approved at the
			// deadline, it would end stale.
			p.addf(key+".approval_timeout", "%s is not shorter than queue.max_age %s: a task approved late would end stale", eff, c.Queue.MaxAge)
		}
	}
	return p.err()
}

// Environment variables that override the file.
const (
	envInstanceID        = "AUTODIAG_INSTANCE_ID"
	envRedisURL          = "AUTODIAG_REDIS_URL"
	envQueueURL          = "AUTODIAG_QUEUE_URL"
	envLifecycleQueueURL = "AUTODIAG_LIFECYCLE_QUEUE_URL"
	envAdminAddr         = "AUTODIAG_ADMIN_ADDR"
	envLogLevel          = "AUTODIAG_LOG_LEVEL"
	envWorkers           = "AUTODIAG_WORKERS"
	envHostNames         = "AUTODIAG_HOST_NAMES"
)

// Env names the AUTODIAG_* variables that override the file.
func Env() []string {
	return []string{envInstanceID, envRedisURL, envQueueURL, envLifecycleQueueURL, envAdminAddr, envLogLevel, envWorkers, envHostNames}
}

// applyEnv overrides the common keys from AUTODIAG_* variables; set maps
// each key it overrode to its variable.
func (c *Config) applyEnv(lookup func(string) (string, bool)) (set map[string]string, err error) {
	set = map[string]string{}
	str := func(name, key string, dst *string) {
		if v, ok := lookup(name); ok {
			*dst = v
			set[key] = name
		}
	}
	str(envInstanceID, "instance_id", &c.InstanceID)
	str(envRedisURL, "redis.url", &c.Redis.URL)
	str(envQueueURL, "queue.url", &c.Queue.URL)
	str(envLifecycleQueueURL, "lifecycle.queue_url", &c.Lifecycle.QueueURL)
	str(envAdminAddr, "admin_addr", &c.AdminAddr)
	str(envLogLevel, "log_level", &c.LogLevel)
	if v, ok := lookup(envRedisURL); ok && v != "" {
		// The variable names the store outright: it replaces the file's
		// seeds or secret rather than conflicting with them.
		c.Redis.Addrs = nil
		c.Redis.URLSecret = ""
	}
	if v, ok := lookup(envHostNames); ok {
		c.HostNames = nil
		for n := range strings.SplitSeq(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				c.HostNames = append(c.HostNames, n)
			}
		}
		set["host_names"] = envHostNames
	}
	if v, ok := lookup(envWorkers); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return set, &ConfigError{Key: "workers", Line: lineNotInFile, Err: fmt.Errorf("%s=%q is not a number", envWorkers, v)}
		}
		c.Workers = n
		set["workers"] = envWorkers
	}
	return set, nil
}
