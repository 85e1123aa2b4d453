package harness

import (
	"fmt"
	"strings"
	"time"
)

// AgentConfig is the YAML of one agent, most often on a fake queue. The
// catalog: noop (/bin/true) and, with a Ledger, the ledger's script as
// mark (append), short (then sleep 0.1 s), slow (3 s), long (7 s), longer
// (10 s), gate (then wait for the gate) and param (then sleep
// {param.secs}); Catalog adds more.
type AgentConfig struct {
	Instance   string
	Workers    int
	QueueURL   string // "" = embedded (tasks through the admin API only)
	DLQURL     string
	Visibility time.Duration // queue.visibility_timeout; 0 = 2s
	WaitTime   time.Duration // queue.wait_time; 0 = 2s
	RedisAddr  string        // "" = in-memory state
	// RedisAddrs are a Cluster's seeds (redis.addrs), in place of RedisAddr.
	RedisAddrs []string
	Prefix     string
	// RedisTimeout is redis.timeout; 0 = 2s.
	RedisTimeout time.Duration
	StateFail    string // redis.state_fail; "" = the default
	AuditShards  int    // redis.audit_shards; 0 = the default
	InstShards   int    // redis.instance_shards; 0 = the default
	Ledger       *Ledger
	Catalog      string // more diagnostics, YAML list items indented two spaces
	Rules        string // limiter rules, YAML list items indented four spaces
	LimiterFail  string // limiter.fail; "" = the default
	LogLevel     string // "" = info
	// TargetWait is queue.target_wait; 0 = the default.
	TargetWait time.Duration
}

// ledgerDiagnostics are the catalog entries over the ledger's script: name
// and the argument after the task id.
var ledgerDiagnostics = []struct{ name, arg string }{
	{"mark", ""}, {"short", "0.1"}, {"slow", "3"}, {"long", "7"}, {"longer", "10"}, {"gate", "gate"},
}

// YAML renders the config.
func (c AgentConfig) YAML() string {
	var b strings.Builder
	level := c.LogLevel
	if level == "" {
		level = "info"
	}
	vis := c.Visibility
	if vis == 0 {
		vis = 2 * time.Second
	}
	wait := c.WaitTime
	if wait == 0 {
		wait = 2 * time.Second
	}
	fmt.Fprintf(&b, "instance_id: %s\nadmin_addr: 127.0.0.1:0\nlog_level: %s\nworkers: %d\n", c.Instance, level, c.Workers)
	if c.QueueURL != "" {
		fmt.Fprintf(&b, "queue:\n  url: '%s'\n  wait_time: %s\n  batch_size: 10\n  visibility_timeout: %s\n", c.QueueURL, wait, vis)
		if c.DLQURL != "" {
			fmt.Fprintf(&b, "  dlq_url: '%s'\n", c.DLQURL)
		}
		if c.TargetWait > 0 {
			fmt.Fprintf(&b, "  target_wait: %s\n", c.TargetWait)
		}
	}
	if c.RedisAddr != "" || len(c.RedisAddrs) > 0 {
		timeout := c.RedisTimeout
		if timeout == 0 {
			timeout = 2 * time.Second
		}
		if len(c.RedisAddrs) > 0 {
			fmt.Fprintf(&b, "redis:\n  addrs: ['%s']\n", strings.Join(c.RedisAddrs, "', '"))
		} else {
			fmt.Fprintf(&b, "redis:\n  url: 'redis://%s/0'\n", c.RedisAddr)
		}
		fmt.Fprintf(&b, "  prefix: '%s'\n  timeout: %s\n", c.Prefix, timeout)
		if c.StateFail != "" {
			fmt.Fprintf(&b, "  state_fail: %s\n", c.StateFail)
		}
		if c.AuditShards > 0 {
			fmt.Fprintf(&b, "  audit_shards: %d\n", c.AuditShards)
		}
		if c.InstShards > 0 {
			fmt.Fprintf(&b, "  instance_shards: %d\n", c.InstShards)
		}
	}
	// The catalog probes the task's host from wherever it runs (runs_on
	// any, {host} as a last argument the programs ignore), so that
	// any agent of a test's fleet takes any task, as the tests expect.
	b.WriteString("diagnostics:\n  - name: noop\n    command: [/bin/true, '{host}']\n    runs_on: any\n    timeout: 60s\n")
	if c.Ledger != nil {
		for _, d := range ledgerDiagnostics {
			fmt.Fprintf(&b, "  - name: %s\n    runs_on: any\n    command: [/bin/sh, '%s', '{id}', '%s', '{host}'", d.name, c.Ledger.Script, d.arg)
			b.WriteString("]\n    timeout: 60s\n")
		}
		fmt.Fprintf(&b, "  - name: param\n    runs_on: any\n    command: [/bin/sh, '%s', '{id}', '{param.secs}', '{host}']\n    params: {secs: '[0-9]'}\n    timeout: 60s\n", c.Ledger.Script)
	}
	b.WriteString(c.Catalog)
	b.WriteString("limiter:\n")
	if c.LimiterFail != "" {
		fmt.Fprintf(&b, "  fail: %s\n", c.LimiterFail)
	}
	b.WriteString("  hosts:\n    allow: ['^[a-z0-9-]+(\\.[a-z0-9-]+)*$']\n")
	if c.Rules == "" {
		b.WriteString("  rules: []\n")
	} else {
		b.WriteString("  rules:\n" + c.Rules)
	}
	return b.String()
}
