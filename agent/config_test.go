package agent

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("embedded defaults invalid: %v", err)
	}
	cfg, err := LoadConfig(nil, nil)
	if err != nil {
		t.Fatalf("LoadConfig(empty): %v", err)
	}
	if cfg.AdminAddr != "127.0.0.1:9464" || cfg.Workers != 4 || cfg.Queue.URL != "" || cfg.Redis.URL != "" {
		t.Fatalf("unexpected defaults: %+v", cfg)
	}
}

const designExample = `
instance_id: ""
admin_addr: 127.0.0.1:9464
log_level: info
workers: 4
queue:
  url: ""
  wait_time: 20s
  batch_size: 10
  visibility_timeout: 60s
  dlq_url: ""
  max_age: 1h
redis:
  url: ""
  addrs: []
  prefix: "autodiag:"
  timeout: 200ms
diagnostics:
  - name: disk-usage
    command: ["/usr/bin/df", "-h", "{param.mount}"]
    params: {mount: '^/[A-Za-z0-9/_.-]*$'}
    timeout: 2m
    max_output: 64KiB
limiter:
  timezone: America/Sao_Paulo
  fail: open
  hosts:
    allow: ['^[a-z0-9-]+(\.[a-z0-9-]+)*\.example\.com$']
  dedupe: {key: alert.event_id, ttl: 10m}
  rules:
    - name: heavy
      match: {diagnostic: [full-dump], host: '^db-', severity: [high, disaster]}
      key: host
      limits:
        - daily: 2
        - min_interval: 2h
        - window: {count: 10, per: 1m}
        - rate: {count: 15, per: 1s, burst: 3}
      block: 1h
      on_exceed: drop
      fail: closed
    - name: default
      limits: [{daily: 2}, {min_interval: 2h}]
lifecycle:
  sources: [signal]
  queue_url: ""
  hook_name: ""
  asg_name: ""
  heartbeat_interval: 30s
  drain_timeout: 10m
  on_timeout: continue
  queued: finish
  imds_poll_interval: 5s
cloudwatch:
  enabled: false
  namespace: autodiag
`

func TestDesignExampleLoads(t *testing.T) {
	cfg, err := LoadConfig([]byte(designExample), nil)
	if err != nil {
		t.Fatalf("DESIGN.md example rejected: %v", err)
	}
	if len(cfg.Diagnostics) != 1 || cfg.Diagnostics[0].MaxOutput != 64<<10 || cfg.Diagnostics[0].Timeout != 2*time.Minute {
		t.Fatalf("diagnostics = %+v", cfg.Diagnostics)
	}
	if len(cfg.Limiter.Rules) != 2 || cfg.Limiter.Rules[0].Limits[3].Rate.Burst != 3 || cfg.Limiter.Rules[0].Block != time.Hour {
		t.Fatalf("rules = %+v", cfg.Limiter.Rules)
	}
	if len(cfg.Limiter.Hosts.Allow) != 1 {
		t.Fatalf("allow list merged with defaults: %v", cfg.Limiter.Hosts.Allow)
	}
}

func TestConfigErrorsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string // substrings of the error, each naming a key (and line)
	}{
		{"unknown top key", "workers: 2\nworkerz: 3\n", []string{"workerz (line 2): unknown key"}},
		{"unknown nested key", "queue:\n  url: \"\"\n  visibility: 30s\n", []string{"queue.visibility (line 3): unknown key"}},
		{"unknown key in a rule", "limiter:\n  rules:\n    - name: a\n      limits: [{daily: 1}]\n      burst: 3\n", []string{"limiter.rules[0].burst (line 5): unknown key"}},
		{"bad duration", "queue:\n  wait_time: soon\n", []string{"queue.wait_time (line 2)"}},
		{"bad size", "diagnostics:\n  - name: x\n    command: [/bin/true]\n    max_output: lots\n", []string{"diagnostics[0].max_output (line 4)"}},
		{"bad int", "workers: many\n", []string{"workers (line 1)"}},
		{"workers out of range", "workers: 0\n", []string{"workers (line 1): must be between 1 and 256"}},
		{"several at once", "workers: 0\nlog_level: loud\nqueue:\n  batch_size: 11\n  wait_time: 30s\n", []string{
			"workers (line 1)", "log_level (line 2)", "queue.batch_size (line 4)", "queue.wait_time (line 5)"}},
		{"redis scheme", "redis:\n  url: http://x\n", []string{"redis.url (line 2)"}},
		{"url and addrs", "redis:\n  url: redis://a:6379\n  addrs: [b:6379]\n", []string{"redis.addrs (line 3)"}},
		{"relative command", "diagnostics:\n  - name: x\n    command: [df]\n", []string{"diagnostics[0].command[0] (line 3)"}},
		{"duplicate diagnostic", "diagnostics:\n  - {name: x, command: [/bin/true]}\n  - {name: x, command: [/bin/true]}\n", []string{"diagnostics[1].name (line 3): duplicate"}},
		{"diagnostic longer than drain", "diagnostics:\n  - {name: x, command: [/bin/true], timeout: 20m}\n", []string{"diagnostics[0].timeout (line 2)"}},
		{"empty allow list", "limiter:\n  hosts:\n    allow: []\n", []string{"limiter.hosts.allow (line 3)"}},
		{"limiter timezone", "limiter:\n  timezone: Mars/Olympus\n", []string{"limiter.timezone (line 2)"}},
		{"limiter window per", "limiter:\n  rules:\n    - name: a\n      limits:\n        - window: {count: 10, per: 0s}\n", []string{"limiter.rules[0].limits[0].window.per"}},
		{"lifecycle source", "lifecycle:\n  sources: [signal, carrier-pigeon]\n", []string{"lifecycle.sources[1] (line 2)"}},
		{"heartbeat nesting", "lifecycle:\n  hook_heartbeat_timeout: 60s\n  heartbeat_interval: 30s\n", []string{"lifecycle.heartbeat_interval (line 3)"}},
		{"not a mapping", "- a\n- b\n", []string{"config (line 1)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig([]byte(tc.yaml), nil)
			if err == nil {
				t.Fatal("LoadConfig accepted an invalid file")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestEnvOverrides(t *testing.T) {
	env := map[string]string{
		"AUTODIAG_INSTANCE_ID":  "i-0abc",
		"AUTODIAG_REDIS_URL":    "redis://127.0.0.1:6379/0",
		"AUTODIAG_QUEUE_URL":    "http://127.0.0.1:9324/000000000000/tasks",
		"AUTODIAG_ADMIN_ADDR":   "127.0.0.1:0",
		"AUTODIAG_LOG_LEVEL":    "debug",
		"AUTODIAG_WORKERS":      "8",
		"AUTODIAG_UNRELATED_XY": "ignored",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := LoadConfig([]byte("workers: 2\nlog_level: warn\n"), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.InstanceID != "i-0abc" || cfg.Redis.URL != env["AUTODIAG_REDIS_URL"] || cfg.Queue.URL != env["AUTODIAG_QUEUE_URL"] ||
		cfg.AdminAddr != "127.0.0.1:0" || cfg.LogLevel != "debug" || cfg.Workers != 8 {
		t.Fatalf("env not applied: %+v", cfg)
	}
	env["AUTODIAG_WORKERS"] = "lots"
	if _, err := LoadConfig(nil, lookup); err == nil || !strings.Contains(err.Error(), "workers") {
		t.Fatalf("bad AUTODIAG_WORKERS: %v", err)
	}
	env["AUTODIAG_WORKERS"] = "0"
	if _, err := LoadConfig(nil, lookup); err == nil || !strings.Contains(err.Error(), "workers") {
		t.Fatalf("env value not validated: %v", err)
	}
}
