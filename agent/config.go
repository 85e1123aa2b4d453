package agent

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

	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/lifecycle"
	"github.com/autodiag/autodiag/limiter"
)

// Config is the whole configuration file (DESIGN.md "Configuration").
// Every field has a default (DefaultConfig); a file overrides what it
// names, AUTODIAG_* variables override the common keys (ApplyEnv).
type Config struct {
	// InstanceID names this agent; empty = IMDS instance-id, else hostname.
	InstanceID string `yaml:"instance_id"`
	// AdminAddr is the admin HTTP listener; loopback by default.
	AdminAddr string `yaml:"admin_addr"`
	// LogLevel is debug, info (default), warn or error.
	LogLevel string `yaml:"log_level"`
	// Workers is how many tasks run at once (default 4).
	Workers     int                 `yaml:"workers"`
	Queue       QueueConfig         `yaml:"queue"`
	Redis       RedisConfig         `yaml:"redis"`
	Diagnostics []runner.Diagnostic `yaml:"diagnostics"`
	Limiter     limiter.Config      `yaml:"limiter"`
	Lifecycle   lifecycle.Config    `yaml:"lifecycle"`
	CloudWatch  CloudWatchConfig    `yaml:"cloudwatch"`
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
}

// RedisConfig is the shared state store.
type RedisConfig struct {
	// URL is redis:// or rediss://; empty (and no Addrs) = in-memory state.
	URL string `yaml:"url"`
	// Addrs are cluster or sentinel seeds, instead of URL.
	Addrs []string `yaml:"addrs"`
	// MasterName selects Sentinel mode with Addrs.
	MasterName string `yaml:"master_name"`
	// Prefix of every key (default "autodiag:").
	Prefix string `yaml:"prefix"`
	// Timeout bounds each call (default 200ms); past it the limiter rule's
	// fail mode applies.
	Timeout time.Duration `yaml:"timeout"`
}

// CloudWatchConfig controls the DrainSeconds metric for stuck-drain alarms.
type CloudWatchConfig struct {
	Enabled   bool   `yaml:"enabled"`
	Namespace string `yaml:"namespace"` // default "autodiag"
}

// DefaultConfig is the embedded configuration `autodiag run` uses with no
// file: in-memory queue and state, a small read-only catalog, signal-only
// lifecycle, a permissive host allow-list (syntax is still enforced) and one
// limiter rule so a runaway alert cannot flood a host.
func DefaultConfig() Config {
	lim := limiter.DefaultConfig()
	lim.Hosts.Allow = []string{`^[a-z0-9-]+(\.[a-z0-9-]+)*$`}
	lim.Rules = []limiter.Rule{{
		Name:   "default",
		Key:    "host+diagnostic",
		Limits: []limiter.Limit{{Window: &limiter.Window{Count: 30, Per: time.Minute}}},
	}}
	return Config{
		AdminAddr: "127.0.0.1:9464",
		LogLevel:  "info",
		Workers:   4,
		Queue: QueueConfig{
			WaitTime:          20 * time.Second,
			BatchSize:         10,
			VisibilityTimeout: 60 * time.Second,
			MaxAge:            time.Hour,
		},
		Redis:       RedisConfig{Prefix: "autodiag:", Timeout: 200 * time.Millisecond},
		Diagnostics: BuiltinCatalog(),
		Limiter:     lim,
		Lifecycle:   lifecycle.DefaultConfig(),
		CloudWatch:  CloudWatchConfig{Namespace: "autodiag"},
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

// ConfigError is one problem of a configuration, naming its key and, when
// it came from a file, the line.
type ConfigError struct {
	Key  string
	Line int
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Key, e.Line, e.Msg)
	}
	return e.Key + ": " + e.Msg
}

// LoadConfig decodes a YAML file over the defaults, strictly (an unknown
// key or a bad value is an error naming the key and line), applies the
// AUTODIAG_* overrides read through env (nil for none) and validates the
// result. Every problem is reported at once, each naming its key, and its
// line when the key is in the file. Empty data means the defaults.
func LoadConfig(data []byte, env func(string) (string, bool)) (Config, error) {
	cfg := DefaultConfig()
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("config: %w", err)
	}
	if root.Kind != 0 {
		if errs := checkKeys(&root); len(errs) > 0 {
			return cfg, errors.Join(errs...)
		}
		// Lists in the file replace the defaults rather than merge into them.
		if lookup(&root, "diagnostics") != nil {
			cfg.Diagnostics = nil
		}
		if lookup(&root, "limiter.rules") != nil {
			cfg.Limiter.Rules = nil
		}
		if lookup(&root, "limiter.hosts.allow") != nil {
			cfg.Limiter.Hosts.Allow = nil
		}
		if err := root.Decode(&cfg); err != nil {
			return cfg, typeErrors(&root, err)
		}
	}
	var errs []error
	if env != nil {
		errs = append(errs, cfg.applyEnv(env))
	}
	errs = append(errs, cfg.Validate())
	err := errors.Join(errs...)
	if err != nil && root.Kind != 0 {
		err = annotate(&root, err)
	}
	return cfg, err
}

// instanceIDPattern is what instance_id may hold: it becomes part of Redis
// keys and log fields.
var instanceIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Validate reports every problem of the configuration at once, each
// naming its key.
func (c Config) Validate() error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if c.InstanceID != "" && !instanceIDPattern.MatchString(c.InstanceID) {
		add("instance_id", "%q must match %s", c.InstanceID, instanceIDPattern)
	}
	if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
		add("admin_addr", "%q is not host:port: %v", c.AdminAddr, err)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("log_level", "must be debug, info, warn or error, not %q", c.LogLevel)
	}
	if c.Workers < 1 || c.Workers > 256 {
		add("workers", "must be between 1 and 256, not %d", c.Workers)
	}
	q := c.Queue
	if q.URL != "" {
		if _, err := url.ParseRequestURI(q.URL); err != nil {
			add("queue.url", "not a URL: %v", err)
		}
	}
	if q.DLQURL != "" {
		if _, err := url.ParseRequestURI(q.DLQURL); err != nil {
			add("queue.dlq_url", "not a URL: %v", err)
		}
	}
	if q.WaitTime < 0 || q.WaitTime > 20*time.Second {
		add("queue.wait_time", "must be between 0s and 20s (SQS long poll), not %s", q.WaitTime)
	}
	if q.BatchSize < 1 || q.BatchSize > 10 {
		add("queue.batch_size", "must be between 1 and 10, not %d", q.BatchSize)
	}
	if q.VisibilityTimeout < 2*time.Second || q.VisibilityTimeout > 12*time.Hour {
		add("queue.visibility_timeout", "must be between 2s and 12h, not %s", q.VisibilityTimeout)
	}
	if q.MaxAge < 0 {
		add("queue.max_age", "must not be negative")
	}
	r := c.Redis
	if r.URL != "" && len(r.Addrs) > 0 {
		add("redis.addrs", "set either redis.url or redis.addrs, not both")
	}
	if r.URL != "" {
		if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
			add("redis.url", "must be a redis:// or rediss:// URL")
		}
	}
	for i, a := range r.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			add(fmt.Sprintf("redis.addrs[%d]", i), "%q is not host:port", a)
		}
	}
	if r.MasterName != "" && len(r.Addrs) == 0 {
		add("redis.master_name", "needs redis.addrs (the sentinels)")
	}
	if r.Timeout <= 0 || r.Timeout > 30*time.Second {
		add("redis.timeout", "must be between 1ms and 30s, not %s", r.Timeout)
	}
	if r.Prefix == "" {
		add("redis.prefix", "must not be empty")
	}
	if len(c.Diagnostics) == 0 {
		add("diagnostics", "the catalog is empty")
	}
	seen := map[string]bool{}
	for i, d := range c.Diagnostics {
		key := fmt.Sprintf("diagnostics[%d]", i)
		errs = append(errs, prefixed(key, d.Validate())...)
		if seen[d.Name] {
			add(key+".name", "duplicate diagnostic %q", d.Name)
		}
		seen[d.Name] = true
		if d.Timeout > c.Lifecycle.DrainTimeout && c.Lifecycle.DrainTimeout > 0 {
			add(key+".timeout", "%s exceeds lifecycle.drain_timeout %s: a drain would always cut it short", d.Timeout, c.Lifecycle.DrainTimeout)
		}
	}
	errs = append(errs, prefixed("limiter", c.Limiter.Validate())...)
	if len(c.Limiter.Hosts.Allow) == 0 {
		add("limiter.hosts.allow", "no pattern: every task would be rejected")
	}
	errs = append(errs, prefixed("lifecycle", c.Lifecycle.Validate())...)
	if c.Lifecycle.Has("sqs") && c.Lifecycle.QueueURL != "" && c.Lifecycle.QueueURL == c.Queue.URL {
		add("lifecycle.queue_url", "must not be the task queue")
	}
	if c.CloudWatch.Enabled && c.CloudWatch.Namespace == "" {
		add("cloudwatch.namespace", "must be set when cloudwatch.enabled")
	}
	return errors.Join(errs...)
}

// prefixed turns a leaf package's joined "key: problem" errors into
// ConfigErrors under section.
func prefixed(section string, err error) []error {
	if err == nil {
		return nil
	}
	list := flatten(err)
	out := make([]error, 0, len(list))
	for _, e := range list {
		var ce *ConfigError
		if errors.As(e, &ce) {
			out = append(out, &ConfigError{Key: section + "." + ce.Key, Msg: ce.Msg})
			continue
		}
		msg := e.Error()
		key, rest, ok := strings.Cut(msg, ": ")
		if !ok || strings.ContainsAny(key, " \"") {
			out = append(out, &ConfigError{Key: section, Msg: msg})
			continue
		}
		sep := "."
		if strings.HasPrefix(key, "[") {
			sep = ""
		}
		out = append(out, &ConfigError{Key: section + sep + key, Msg: rest})
	}
	return out
}

// annotate adds YAML line numbers to ConfigErrors.
func annotate(root *yaml.Node, err error) error {
	if err == nil {
		return nil
	}
	list := flatten(err)
	for _, e := range list {
		var ce *ConfigError
		if errors.As(e, &ce) && ce.Line == 0 {
			ce.Line = lineOf(root, ce.Key)
		}
	}
	return errors.Join(list...)
}

// flatten unnests errors.Join trees.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, flatten(e)...)
	}
	return out
}

// pathSteps splits "limiter.rules[0].limits[1].window" into steps.
func pathSteps(key string) []string {
	var steps []string
	for part := range strings.SplitSeq(key, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				steps = append(steps, part)
				break
			}
			if i > 0 {
				steps = append(steps, part[:i])
			}
			j := strings.IndexByte(part, ']')
			if j < i {
				break
			}
			steps = append(steps, part[i:j+1])
			part = part[j+1:]
		}
	}
	return steps
}

// lookup finds the node at key, nil if absent.
func lookup(root *yaml.Node, key string) *yaml.Node {
	n, _ := walk(root, key)
	return n
}

// lineOf returns the line of the deepest node on key's path that exists.
func lineOf(root *yaml.Node, key string) int {
	_, line := walk(root, key)
	return line
}

func walk(root *yaml.Node, key string) (*yaml.Node, int) {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, step := range pathSteps(key) {
		var next *yaml.Node
		if strings.HasPrefix(step, "[") {
			idx, err := strconv.Atoi(strings.Trim(step, "[]"))
			if err == nil && n.Kind == yaml.SequenceNode && idx < len(n.Content) {
				next = n.Content[idx]
			}
		} else if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == step {
					line = n.Content[i].Line
					next = n.Content[i+1]
					break
				}
			}
		}
		if next == nil {
			return nil, line
		}
		n = next
		if line == 0 || n.Kind != yaml.MappingNode {
			line = n.Line
		}
	}
	return n, line
}

// typeErrors rewrites the YAML decoder's "line N: cannot unmarshal ..."
// errors so each names its key.
func typeErrors(root *yaml.Node, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return sizeErrors(root, err)
	}
	keys := keysByLine(root)
	var errs []error
	for _, msg := range te.Errors {
		line := 0
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if i := strings.IndexByte(rest, ':'); i > 0 {
				line, _ = strconv.Atoi(rest[:i])
				msg = strings.TrimSpace(rest[i+1:])
			}
		}
		key := keys[line]
		if key == "" {
			key = "config"
		}
		errs = append(errs, &ConfigError{Key: key, Line: line, Msg: msg})
	}
	return errors.Join(errs...)
}

// sizeErrors locates the size values the decoder could not parse (its
// TextUnmarshaler errors carry no position).
func sizeErrors(root *yaml.Node, err error) error {
	var errs []error
	if d := lookup(root, "diagnostics"); d != nil && d.Kind == yaml.SequenceNode {
		for i := range d.Content {
			key := fmt.Sprintf("diagnostics[%d].max_output", i)
			if n := lookup(root, key); n != nil {
				if _, perr := runner.ParseSize(n.Value); perr != nil {
					errs = append(errs, &ConfigError{Key: key, Line: n.Line, Msg: perr.Error()})
				}
			}
		}
	}
	if len(errs) == 0 {
		return fmt.Errorf("config: %w", err)
	}
	return errors.Join(errs...)
}

// keysByLine maps each line to the dotted key of the value on it.
func keysByLine(root *yaml.Node) map[int]string {
	out := map[int]string{}
	var visit func(n *yaml.Node, path string)
	visit = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				visit(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				p := k
				if path != "" {
					p = path + "." + k
				}
				if _, ok := out[n.Content[i].Line]; !ok {
					out[n.Content[i].Line] = p
				}
				out[n.Content[i+1].Line] = p
				visit(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if _, ok := out[c.Line]; !ok {
					out[c.Line] = p
				}
				visit(c, p)
			}
		}
	}
	visit(root, "")
	return out
}

// checkKeys reports unknown keys, each with its dotted path and line,
// before decoding (the decoder's own message names the Go type, not the key).
func checkKeys(root *yaml.Node) []error {
	var errs []error
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return []error{&ConfigError{Key: "config", Line: n.Line, Msg: "the file must be a YAML mapping"}}
	}
	checkMapping(n, "", configSchema, &errs)
	return errs
}

// schema describes the accepted keys: a nil value is a leaf, "*" accepts
// any key (maps such as params), "[]" marks a list of the inner schema.
type schema map[string]any

var limitSchema = schema{"daily": nil, "min_interval": nil,
	"window": schema{"count": nil, "per": nil}, "rate": schema{"count": nil, "per": nil, "burst": nil}}

var configSchema = schema{
	"instance_id": nil, "admin_addr": nil, "log_level": nil, "workers": nil,
	"queue":       schema{"url": nil, "wait_time": nil, "batch_size": nil, "visibility_timeout": nil, "dlq_url": nil, "max_age": nil},
	"redis":       schema{"url": nil, "addrs": nil, "master_name": nil, "prefix": nil, "timeout": nil},
	"diagnostics": []schema{{"name": nil, "command": nil, "params": schema{"*": nil}, "timeout": nil, "max_output": nil}},
	"limiter": schema{
		"timezone": nil, "fail": nil,
		"hosts":  schema{"allow": nil},
		"dedupe": schema{"key": nil, "ttl": nil},
		"rules": []schema{{
			"name": nil, "key": nil, "block": nil, "on_exceed": nil, "fail": nil,
			"match":  schema{"diagnostic": nil, "host": nil, "severity": nil},
			"limits": []schema{limitSchema},
		}},
	},
	"lifecycle": schema{"sources": nil, "queue_url": nil, "hook_name": nil, "asg_name": nil, "hook_heartbeat_timeout": nil,
		"heartbeat_interval": nil, "drain_timeout": nil, "on_timeout": nil, "queued": nil, "imds_poll_interval": nil},
	"cloudwatch": schema{"enabled": nil, "namespace": nil},
}

func checkMapping(n *yaml.Node, path string, s schema, errs *[]error) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		sub, ok := s[k.Value]
		if !ok {
			if _, any := s["*"]; any {
				continue
			}
			*errs = append(*errs, &ConfigError{Key: p, Line: k.Line, Msg: "unknown key"})
			continue
		}
		checkValue(v, p, sub, errs)
	}
}

func checkValue(v *yaml.Node, p string, sub any, errs *[]error) {
	switch inner := sub.(type) {
	case schema:
		if v.Kind == yaml.MappingNode {
			checkMapping(v, p, inner, errs)
		}
	case []schema:
		if v.Kind == yaml.SequenceNode {
			for j, item := range v.Content {
				if item.Kind == yaml.MappingNode {
					checkMapping(item, fmt.Sprintf("%s[%d]", p, j), inner[0], errs)
				}
			}
		}
	}
}

// Env names the AUTODIAG_* variables that override the file.
var Env = []string{"AUTODIAG_INSTANCE_ID", "AUTODIAG_REDIS_URL", "AUTODIAG_QUEUE_URL",
	"AUTODIAG_LIFECYCLE_QUEUE_URL", "AUTODIAG_ADMIN_ADDR", "AUTODIAG_LOG_LEVEL", "AUTODIAG_WORKERS"}

// applyEnv overrides the common keys from AUTODIAG_* variables.
func (c *Config) applyEnv(lookup func(string) (string, bool)) error {
	set := func(name string, dst *string) {
		if v, ok := lookup(name); ok {
			*dst = v
		}
	}
	set("AUTODIAG_INSTANCE_ID", &c.InstanceID)
	set("AUTODIAG_REDIS_URL", &c.Redis.URL)
	set("AUTODIAG_QUEUE_URL", &c.Queue.URL)
	set("AUTODIAG_LIFECYCLE_QUEUE_URL", &c.Lifecycle.QueueURL)
	set("AUTODIAG_ADMIN_ADDR", &c.AdminAddr)
	set("AUTODIAG_LOG_LEVEL", &c.LogLevel)
	if v, ok := lookup("AUTODIAG_REDIS_URL"); ok && v != "" {
		c.Redis.Addrs = nil
	}
	if v, ok := lookup("AUTODIAG_WORKERS"); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			return &ConfigError{Key: "workers", Msg: fmt.Sprintf("AUTODIAG_WORKERS=%q is not a number", v)}
		}
		c.Workers = n
	}
	return nil
}
