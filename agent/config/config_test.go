package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/internal/configerr"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("embedded defaults invalid: %v", err)
	}
	cfg, err := Load(nil, nil)
	if err != nil {
		t.Fatalf("Load(empty): %v", err)
	}
	if cfg.AdminAddr != "127.0.0.1:9464" || cfg.Workers != 4 || cfg.Queue.URL != "" || cfg.Redis.URL != "" {
		t.Fatalf("unexpected defaults: %+v", cfg)
	}
}

// fullExample sets every section of README "Configuration".
const fullExample = `
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
      match: {diagnostic: [disk-usage], host: '^db-', severity: [high, disaster]}
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

func TestFullExampleLoads(t *testing.T) {
	cfg, err := Load([]byte(fullExample), nil)
	if err != nil {
		t.Fatalf("full example rejected: %v", err)
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
	if cfg.Drain.Timeout != 10*time.Minute || cfg.Drain.Queued != drain.QueuedFinish {
		t.Fatalf("drain = %+v", cfg.Drain)
	}
}

func TestConfigErrorsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string // substrings of the error, each naming a key (and line)
	}{
		{"unknown top key", "workers: 2\nworkerz: 3\n", []string{"workerz (line 2): unknown key"}},
		{"unknown key suggests the nearest", "wokers: 2\n", []string{`wokers (line 1): unknown key; did you mean "workers"?`}},
		{"unknown nested key suggests within its section", "redis:\n  timout: 1s\n", []string{`redis.timout (line 2): unknown key; did you mean "timeout"?`}},
		{"unknown key far from any", "zzzzzzzzzzzz: 1\n", []string{"zzzzzzzzzzzz (line 1): unknown key"}},
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
		{"allow pattern naming localhost", "limiter:\n  hosts:\n    allow: ['^web-[0-9]+$', localhost]\n", []string{`limiter.hosts.allow[1] (line 3): "localhost" names localhost, which can never be a target`}},
		{"allow pattern naming a loopback", "limiter:\n  hosts:\n    allow: ['^127\\.0\\.0\\.1$']\n  allow_ip_literals: true\n", []string{`limiter.hosts.allow[0] (line 3): "^127\\.0\\.0\\.1$" names 127.0.0.1, which can never be a target`}},
		{"allow pattern naming an IP literal", "limiter:\n  hosts:\n    allow: ['10\\.0\\.0\\.1']\n", []string{"limiter.hosts.allow[0] (line 3)", "allow_ip_literals is off"}},
		{"rule matches a diagnostic not in the catalog", "limiter:\n  rules:\n    - name: a\n      match: {diagnostic: [memory, uptme]}\n      limits: [{daily: 1}]\n",
			[]string{`limiter.rules[0].match.diagnostic[1] (line 4): "uptme" is not in the diagnostics catalog; did you mean "uptime"?`}},
		{"rule matches a diagnostic far from any", "limiter:\n  rules:\n    - name: a\n      match: {diagnostic: [zzzzzz]}\n      limits: [{daily: 1}]\n",
			[]string{`limiter.rules[0].match.diagnostic[0] (line 4): "zzzzzz" is not in the diagnostics catalog`}},
		{"indentation error names the line it is on", "workers: 2\nlimiter:\n  rules:\n    - name: a\n   key: host\n",
			[]string{"config (line 5): did not find expected key (check the indentation against the block that starts at line 2)"}},
		{"syntax error on its own line", "workers: 2\nlog_level: [info\n", []string{"config (line 2)"}},
		{"bad allow pattern", "limiter:\n  hosts:\n    allow: ['^a$', '(']\n", []string{"limiter.hosts.allow[1] (line 3): invalid regexp"}},
		{"zero drain timeout", "lifecycle:\n  drain_timeout: 0s\n", []string{"lifecycle.drain_timeout (line 2): must be positive"}},
		{"unknown queued policy", "lifecycle:\n  queued: drop\n", []string{"lifecycle.queued (line 2): must be finish or release"}},
		{"drain past the global timeout", "lifecycle:\n  hook_heartbeat_timeout: 60s\n  heartbeat_interval: 20s\n  drain_timeout: 100m\n",
			[]string{"lifecycle.drain_timeout (line 4): must be below the lifecycle action's global timeout (1h40m0s"}},
		{"sqs queue bounds", "queue:\n  url: https://sqs.us-east-1.amazonaws.com/1/q\n  visibility_timeout: 13h\n", []string{"queue.visibility_timeout (line 3)"}},
		{"limiter timezone", "limiter:\n  timezone: Mars/Olympus\n", []string{"limiter.timezone (line 2)"}},
		{"limiter window per", "limiter:\n  rules:\n    - name: a\n      limits:\n        - window: {count: 10, per: 0s}\n", []string{"limiter.rules[0].limits[0].window.per"}},
		{"lifecycle source", "lifecycle:\n  sources: [signal, carrier-pigeon]\n", []string{"lifecycle.sources[1] (line 2)"}},
		{"heartbeat nesting", "lifecycle:\n  hook_heartbeat_timeout: 60s\n  heartbeat_interval: 30s\n", []string{"lifecycle.heartbeat_interval (line 3)"}},
		{"not a mapping", "- a\n- b\n", []string{"config (line 1)"}},
		{"intake open beyond loopback", "intake:\n  addr: 0.0.0.0:9465\n", []string{"intake.auth (line 1): intake.addr \"0.0.0.0:9465\" is reachable from other hosts"}},
		{"intake max_body", "intake:\n  max_body: 10\n", []string{"intake.max_body (line 2)"}},
		{"route template", "routes:\n  - name: a\n    host: '{{ .Labels.x'\n    tasks: [{diagnostic: uptime}]\n", []string{"routes[0].host (line 3): invalid template"}},
		{"route diagnostic not in catalog", "routes:\n  - name: a\n    tasks: [{diagnostic: uptim}]\n", []string{"routes[0].tasks[0].diagnostic (line 3): \"uptim\" is not in the diagnostics catalog"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.yaml), nil)
			if err == nil {
				t.Fatal("Load accepted an invalid file")
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
	cfg, err := Load([]byte("workers: 2\nlog_level: warn\n"), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.InstanceID != "i-0abc" || cfg.Redis.URL != env["AUTODIAG_REDIS_URL"] || cfg.Queue.URL != env["AUTODIAG_QUEUE_URL"] ||
		cfg.AdminAddr != "127.0.0.1:0" || cfg.LogLevel != "debug" || cfg.Workers != 8 {
		t.Fatalf("env not applied: %+v", cfg)
	}
	env["AUTODIAG_WORKERS"] = "lots"
	if _, err := Load(nil, lookup); err == nil || !strings.Contains(err.Error(), "workers") {
		t.Fatalf("bad AUTODIAG_WORKERS: %v", err)
	}
	env["AUTODIAG_WORKERS"] = "0"
	if _, err := Load(nil, lookup); err == nil || !strings.Contains(err.Error(), "workers") {
		t.Fatalf("env value not validated: %v", err)
	}
}

// catalogYAML is a config whose one diagnostic runs argv, with a
// permissive parameter x.
func catalogYAML(t *testing.T, argv []string) string {
	t.Helper()
	cmd, err := json.Marshal(argv)
	if err != nil {
		t.Fatal(err)
	}
	return "diagnostics:\n  - name: d\n    params: {x: '.*'}\n    command: " + string(cmd) + "\n"
}

func TestConfigRejectsPlaceholderInScript(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		bad  int // index of the rejected argument; -1 = accepted
	}{
		{"sh -c", []string{"/bin/sh", "-c", "echo {param.x}"}, 2},
		{"bash -ec", []string{"/bin/bash", "-ec", "df {param.x}"}, 2},
		{"bash -lc", []string{"/usr/bin/bash", "-lc", "echo {host}"}, 2},
		{"dash", []string{"/bin/dash", "-c", "echo {param.x}"}, 2},
		{"zsh", []string{"/bin/zsh", "-c", "echo {id}"}, 2},
		{"ksh", []string{"/bin/ksh", "-c", "echo {param.x}"}, 2},
		{"options after -c", []string{"/bin/sh", "-c", "-e", "echo {param.x}"}, 3},
		{"option with a value", []string{"/bin/bash", "-o", "pipefail", "-c", "echo {param.x}"}, 4},
		{"busybox sh", []string{"/bin/busybox", "sh", "-c", "echo {param.x}"}, 3},
		{"env sh", []string{"/usr/bin/env", "sh", "-c", "echo {param.x}"}, 3},
		{"env options and assignments", []string{"/usr/bin/env", "-i", "-u", "HOME", "LANG=C", "/bin/sh", "-c", "echo {param.x}"}, 7},
		{"env -S", []string{"/usr/bin/env", "-S", "sh -c 'echo {param.x}'"}, 2},
		{"timeout in front", []string{"/usr/bin/timeout", "-s", "KILL", "5s", "/bin/sh", "-c", "echo {param.x}"}, 6},
		{"nice and nohup in front", []string{"/usr/bin/nice", "-n", "10", "/usr/bin/nohup", "bash", "-c", "echo {param.x}"}, 6},
		{"setsid and stdbuf in front", []string{"/usr/bin/setsid", "-w", "/usr/bin/stdbuf", "-oL", "sh", "-c", "echo {param.x}"}, 6},
		{"ssh remote command", []string{"/usr/bin/ssh", "-o", "BatchMode=yes", "{host}", "df", "{param.x}"}, 5},
		{"python3 -c", []string{"/usr/bin/python3", "-c", "print('{param.x}')"}, 2},
		{"python -Ic", []string{"/usr/bin/python3.12", "-Ic", "print('{param.x}')"}, 2},
		{"python -cCODE", []string{"/usr/bin/python", "-cprint('{param.x}')"}, 1},
		{"perl -e", []string{"/usr/bin/perl", "-e", "print '{param.x}'"}, 2},
		{"perl -le", []string{"/usr/bin/perl", "-Mstrict", "-le", "print '{param.x}'"}, 3},
		{"ruby -e", []string{"/usr/bin/ruby", "-e", "puts '{param.x}'"}, 2},
		{"node -e", []string{"/usr/bin/node", "-e", "console.log('{param.x}')"}, 2},
		{"node -pe", []string{"/usr/bin/node", "-pe", "'{param.x}'"}, 2},
		{"node --eval=", []string{"/usr/bin/node", "--eval=console.log('{param.x}')"}, 1},

		{"sh value as its own argument", []string{"/bin/sh", "-c", `echo "$1"`, "sh", "{param.x}"}, -1},
		{"bash -ec value as its own argument", []string{"/bin/bash", "-ec", `df -h -- "$1"`, "bash", "{host}"}, -1},
		{"python value as its own argument", []string{"/usr/bin/python3", "-c", "import sys; print(sys.argv[1])", "{param.x}"}, -1},
		{"perl value as its own argument", []string{"/usr/bin/perl", "-e", "print $ARGV[0]", "{param.x}"}, -1},
		{"node value as its own argument", []string{"/usr/bin/node", "-e", "console.log(process.argv[1])", "{param.x}"}, -1},
		{"script file", []string{"/bin/sh", "/opt/diag/check.sh", "{param.x}"}, -1},
		{"env in front of a plain command", []string{"/usr/bin/env", "LANG=C", "/usr/bin/df", "-h", "{param.x}"}, -1},
		{"ssh fixed remote command", []string{"/usr/bin/ssh", "-i", "/etc/autodiag/key", "{host}", "uptime"}, -1},
		{"timeout in front of a plain command", []string{"/usr/bin/timeout", "5s", "/usr/bin/df", "-h", "{param.x}"}, -1},
		{"not an interpreter", []string{"/usr/bin/getent", "ahosts", "{host}"}, -1},
		{"python arguments after -c", []string{"/usr/bin/python3", "-c", "import sys; print(sys.argv[2])", "-c", "{param.x}"}, -1},
		{"python -m", []string{"/usr/bin/python3", "-m", "json.tool", "-c", "{param.x}"}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(catalogYAML(t, tc.argv)), nil)
			if tc.bad < 0 {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			want := fmt.Sprintf("diagnostics[0].command[%d] (line 4): ", tc.bad)
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "instead") && !strings.Contains(err.Error(), "argument of its own") {
				t.Fatalf("error = %v\nwant one naming %q and saying how to pass the value", err, want)
			}
		})
	}
}

func TestConfigScriptPlaceholderSuggestion(t *testing.T) {
	_, err := Load([]byte(catalogYAML(t, []string{"/bin/sh", "-c", "echo {param.x}"})), nil)
	want := `[/bin/sh, -c, 'echo "$1"', sh, '{param.x}']`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error = %v\nwant the suggestion %s", err, want)
	}
}

func TestConfigReportsEveryProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want []string
	}{
		{"every duplicate key", "workers: 1\nworkers: 2\nlog_level: info\nqueue:\n  url: \"\"\n  url: \"\"\nlog_level: warn\n", []string{
			"workers (line 2): duplicate key (first at line 1)", "queue.url (line 6): duplicate key", "log_level (line 7): duplicate key"}},
		{"every type error and the checks", "workers: many\nqueue:\n  wait_time: soon\n  batch_size: 11\nlog_level: loud\n" +
			"diagnostics:\n  - {name: x, command: [/bin/true], max_output: lots, timeout: never}\n", []string{
			"workers (line 1)", "queue.wait_time (line 3)", "queue.batch_size (line 4)", "log_level (line 5)",
			"diagnostics[0].max_output (line 7)", "diagnostics[0].timeout (line 7)"}},
		{"unknown keys and type errors", "workerz: 1\nworkers: [1]\nredis:\n  prefixx: a\n", []string{
			"workerz (line 1): unknown key", "workers (line 2): want a whole number", "redis.prefixx (line 4): unknown key"}},
		{"size overflow", "diagnostics:\n  - name: x\n    command: [/bin/true]\n    max_output: 17179869184GiB\n", []string{
			"diagnostics[0].max_output (line 4)"}},
		{"second document", "workers: 2\n---\nworkers: 3\n", []string{"config (line 3): a second YAML document"}},
		{"line of a list item", "limiter:\n  rules:\n    - name: a\n      limits:\n        - daily: 2\n        - min_interval: 2h\n" +
			"        - window: {count: 10, per: 1m}\n        - {daily: 1, min_interval: 1h}\n", []string{
			"limiter.rules[0].limits[3] (line 8)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.yaml), nil)
			if err == nil {
				t.Fatal("Load accepted an invalid file")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestConfigDedupeKeyIsATaskField(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"alert.event_id", true}, {"host", true}, {"params.ticket", true}, {"", true},
		{"alert.eventid", false}, {"alert_event_id", false}, {"params.", false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, err := Load([]byte("limiter:\n  dedupe:\n    key: "+strconv.Quote(tc.key)+"\n"), nil)
			if tc.ok && err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "limiter.dedupe.key (line 3)")) {
				t.Fatalf("error = %v, want one naming limiter.dedupe.key", err)
			}
		})
	}
}

func TestConfigEffectiveDiagnosticTimeoutWithinDrain(t *testing.T) {
	drainTimeout := runner.DefaultTimeout / 2
	base := fmt.Sprintf("lifecycle:\n  drain_timeout: %s\ndiagnostics:\n", drainTimeout)
	if _, err := Load([]byte(base+"  - {name: x, command: [/bin/true], timeout: "+(drainTimeout/2).String()+"}\n"), nil); err != nil {
		t.Fatalf("a timeout within the drain was rejected: %v", err)
	}
	_, err := Load([]byte(base+"  - {name: x, command: [/bin/true]}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "diagnostics[0].timeout (line 4)") || !strings.Contains(err.Error(), runner.DefaultTimeout.String()) {
		t.Fatalf("error = %v, want diagnostics[0].timeout naming the default %s", err, runner.DefaultTimeout)
	}
}

func TestConfigInstanceIDWithLifecycleSources(t *testing.T) {
	const sqs = "lifecycle:\n  sources: [signal, sqs]\n  queue_url: https://sqs.eu-west-1.amazonaws.com/123456789012/lifecycle\n"
	const imds = "lifecycle:\n  sources: [signal, imds]\n  hook_name: drain\n"
	for _, tc := range []struct {
		name, yaml string
		ok         bool
	}{
		{"sqs, empty (discovered)", "instance_id: \"\"\n" + sqs, true},
		{"sqs, EC2 id", "instance_id: i-0123456789abcdef0\n" + sqs, true},
		{"sqs, short EC2 id", "instance_id: i-01234567\n" + sqs, true},
		{"sqs, hostname", "instance_id: web-1\n" + sqs, false},
		{"sqs, upper case", "instance_id: i-0123456789ABCDEF0\n" + sqs, false},
		{"imds, hostname", "instance_id: web-1\n" + imds, false},
		{"signal only, hostname", "instance_id: web-1\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.yaml), nil)
			if tc.ok && err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "instance_id (line 1)")) {
				t.Fatalf("error = %v, want one naming instance_id", err)
			}
		})
	}
}

func TestConfigNewKeys(t *testing.T) {
	cfg, err := Load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Redis.StateFail != StateFailOpen || cfg.Redis.URLSecret != "" || cfg.Limiter.Hosts.AllowIPLiterals {
		t.Fatalf("defaults: state_fail %q, url_secret %q, allow_ip_literals %v", cfg.Redis.StateFail, cfg.Redis.URLSecret, cfg.Limiter.Hosts.AllowIPLiterals)
	}
	for _, tc := range []struct {
		name, yaml string
		bad        string // key (line) in the error; "" = accepted
		check      func(Config) bool
	}{
		{"state_fail closed", "redis:\n  state_fail: closed\n", "", func(c Config) bool { return c.Redis.StateFail == StateFailClosed }},
		{"state_fail unknown", "redis:\n  state_fail: maybe\n", "redis.state_fail (line 2)", nil},
		{"audit_shards default", "", "", func(c Config) bool { return c.Redis.AuditShards == 1 }},
		{"audit_shards 8", "redis:\n  audit_shards: 8\n", "", func(c Config) bool { return c.Redis.AuditShards == 8 }},
		{"audit_shards 0", "redis:\n  audit_shards: 0\n", "redis.audit_shards (line 2)", nil},
		{"audit_shards past the cap", "redis:\n  audit_shards: 65\n", "redis.audit_shards (line 2)", nil},
		{"instance_shards default", "", "", func(c Config) bool { return c.Redis.InstanceShards == 1 }},
		{"instance_shards 8", "redis:\n  instance_shards: 8\n", "", func(c Config) bool { return c.Redis.InstanceShards == 8 }},
		{"instance_shards 0", "redis:\n  instance_shards: 0\n", "redis.instance_shards (line 2)", nil},
		{"allow_ip_literals", "limiter:\n  hosts:\n    allow_ip_literals: true\n", "", func(c Config) bool { return c.Limiter.Hosts.AllowIPLiterals }},
		{"allow_ip_literals not a bool", "limiter:\n  hosts:\n    allow_ip_literals: sometimes\n", "limiter.hosts.allow_ip_literals (line 3)", nil},
		{"secrets manager ARN", "redis:\n  url_secret: arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/redis-AbCdEf\n", "",
			func(c Config) bool { return c.Redis.URLSecret != "" }},
		{"SSM parameter name", "redis:\n  url_secret: /autodiag/redis-url\n", "",
			func(c Config) bool { return c.Redis.URLSecret != "" }},
		{"SSM parameter ARN", "redis:\n  url_secret: arn:aws:ssm:eu-west-1:123456789012:parameter/autodiag/redis-url\n", "",
			func(c Config) bool { return c.Redis.URLSecret != "" }},
		{"SSM path without the leading slash", "redis:\n  url_secret: autodiag/redis-url\n", "redis.url_secret (line 2)", nil},
		{"other ARN", "redis:\n  url_secret: arn:aws:s3:::bucket/key\n", "redis.url_secret (line 2)", nil},
		{"url and url_secret", "redis:\n  url: redis://127.0.0.1:6379\n  url_secret: /autodiag/redis-url\n", "redis.url_secret (line 3): set either", nil},
		{"addrs and url_secret", "redis:\n  addrs: [a:6379]\n  url_secret: /autodiag/redis-url\n", "redis.url_secret (line 3): set either", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load([]byte(tc.yaml), nil)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("error = %v, want one naming %s", err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Fatalf("not decoded: %+v", cfg.Redis)
			}
		})
	}
	// The variable names the store outright and replaces the file's secret.
	env := func(k string) (string, bool) { return "redis://127.0.0.1:6379", k == "AUTODIAG_REDIS_URL" }
	cfg, err = Load([]byte("redis:\n  url_secret: /autodiag/redis-url\n"), env)
	if err != nil || cfg.Redis.URLSecret != "" || cfg.Redis.URL == "" {
		t.Fatalf("AUTODIAG_REDIS_URL over url_secret: %v, %+v", err, cfg.Redis)
	}
}

func TestConfigErrorsAreTyped(t *testing.T) {
	_, err := Load([]byte("workers: 2\nqueue:\n  visibility: 30s\n  batch_size: 0\n"), nil)
	if !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("errors.Is(err, ErrUnknownKey) = false for %v", err)
	}
	var got []ConfigError
	for _, ce := range Problems(err) {
		got = append(got, ConfigError{Key: ce.Key, Line: ce.Line})
	}
	want := []ConfigError{{Key: "queue.visibility", Line: 3}, {Key: "queue.batch_size", Line: 4}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems = %+v, want %+v", got, want)
	}
	env := func(k string) (string, bool) { return "0", k == "AUTODIAG_WORKERS" }
	_, err = Load([]byte("workers: 2\n"), env)
	if p := Problems(err); len(p) != 1 || p[0].Key != "workers" || p[0].Line != 0 || !strings.Contains(p[0].Error(), "AUTODIAG_WORKERS") {
		t.Fatalf("a value from the environment: %v, want workers naming AUTODIAG_WORKERS and no line", err)
	}
}

// TestConfigSchemaIsTheStructs: every key the Go types have is accepted, so
// the defaults written out as YAML load back to themselves.
func TestConfigSchemaIsTheStructs(t *testing.T) {
	out, err := yaml.Marshal(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(out, nil)
	if err != nil {
		t.Fatalf("the defaults written out do not load:\n%v\n%s", err, out)
	}
	again, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, again) {
		t.Fatalf("round trip changed the config:\n%s\n---\n%s", out, again)
	}
	for _, key := range []string{"redis.state_fail", "redis.url_secret", "limiter.hosts.allow_ip_literals", "lifecycle.imds_poll_interval",
		"lifecycle.drain_timeout", "lifecycle.queued", "limiter.hosts.allow", "limiter.rules"} {
		if lookup(mustParse(t, out), key) == nil {
			t.Errorf("%s is not in the written-out defaults", key)
		}
	}
}

func mustParse(t *testing.T, data []byte) *yaml.Node {
	t.Helper()
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		t.Fatal(err)
	}
	return &n
}

func TestEnvIsACopy(t *testing.T) {
	Env()[0] = "CHANGED"
	if Env()[0] == "CHANGED" {
		t.Fatal("Env returns shared state")
	}
}

// TestConfigAdoptsSectionErrors: a section's typed problem gets the
// section prefixed to its key; an untyped error is the section's, its text
// never parsed for a key.
func TestConfigAdoptsSectionErrors(t *testing.T) {
	var p problems
	p.adopt("limiter", errors.Join(
		configerr.Errorf("rules[0].name", "must be set"),
		errors.New("timezone: unknown time zone Mars/Olympus"),
	))
	p.adopt("diagnostics[2]", configerr.Errorf("command[0]", "must be absolute"))
	var keys []string
	for _, ce := range Problems(p.err()) {
		keys = append(keys, ce.Key)
	}
	want := []string{"limiter.rules[0].name", "limiter", "diagnostics[2].command[0]"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys = %q, want %q", keys, want)
	}
}

// TestConfigSectionProblemsAreTyped: every section's Validate (limiter,
// the host allow-list, lifecycle, drain, the runner's catalog entries, the
// SQS source) reports *configerr.Errors with keys inside the section, so
// no problem of a file with one mistake in each ends up keyed by a bare
// section name.
func TestConfigSectionProblemsAreTyped(t *testing.T) {
	const file = `queue:
  url: https://sqs.us-east-1.amazonaws.com/1/q
  visibility_timeout: 13h
diagnostics:
  - {name: x, command: [/bin/echo, "{param.p}"]}
limiter:
  timezone: Mars/Olympus
  hosts:
    allow: ['(']
lifecycle:
  sources: [kafka]
  drain_timeout: 0s
  queued: drop
`
	_, err := Load([]byte(file), nil)
	var keys []string
	for _, ce := range Problems(err) {
		keys = append(keys, ce.Key)
	}
	want := []string{"queue.visibility_timeout", "diagnostics[0].command[1]", "limiter.timezone",
		"limiter.hosts.allow[0]", "lifecycle.sources[0]", "lifecycle.drain_timeout", "lifecycle.queued"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys = %q, want %q\n%v", keys, want, err)
	}
}

func TestConfigEmptyDocumentsAreTheDefaults(t *testing.T) {
	for _, y := range []string{"", "# nothing\n", "---\n", "~\n", "workers: 2\n---\n", "workers: 2\n---\n# trailing\n"} {
		if _, err := Load([]byte(y), nil); err != nil {
			t.Errorf("%q: %v", y, err)
		}
	}
}
