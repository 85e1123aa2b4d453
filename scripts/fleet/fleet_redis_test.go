package main

import (
	"slices"
	"testing"
)

// TestMonitorCount: MONITOR lines are split into arguments (quotes and
// escapes), a script's commands are counted under the EVALSHA before
// them, and keys are found where each command has them.
func TestMonitorCount(t *testing.T) {
	m := newMonitorCount(map[string]string{"abc123": "agent/state/lua/claim.lua"})
	for _, line := range []string{
		`1796148109.055454 [0 127.0.0.1:56038] "evalsha" "abc123" "2" "p:task:{t1}" "p:lease:{t1}" "a \"quoted\" arg"`,
		`1796148109.055514 [0 lua] "HMGET" "p:task:{t1}" "status"`,
		`1796148109.055530 [0 lua] "set" "p:lease:{t1}" "i-1" "PX" "30000"`,
		`1796148109.061516 [0 127.0.0.1:56044] "xread" "COUNT" "16" "BLOCK" "30000" "STREAMS" "p:handoff:i-1" "0"`,
		`1796148109.061517 [0 127.0.0.1:56044] "info" "commandstats"`,
		`1796148109.061518 [0 127.0.0.1:56044] "evalsha" "ffffffffffffffff" "1" "p:lim:{h}:c:cap" "\x01\x02"`,
		`1796148109.061519 [0 lua] "zcard" "p:lim:{h}:c:cap"`,
		`1796148109.061520 [0 127.0.0.1:56044] "ping"`,
	} {
		m.add(line + "\n")
	}
	if m.Commands != 7 {
		t.Errorf("commands %d, want 7 (INFO is the simulation's)", m.Commands)
	}
	claim := m.Scripts["lua/claim.lua"]
	if claim == nil || claim.Calls != 1 || claim.Commands["hmget"] != 1 || claim.Commands["set"] != 1 || len(claim.Commands) != 2 {
		t.Errorf("claim.lua: %+v", claim)
	}
	if other := m.Scripts["ffffffffffff"]; other == nil || other.Calls != 1 || other.Commands["zcard"] != 1 {
		t.Errorf("unknown script: %+v", other)
	}
	want := map[string]int64{"p:task:{t1}": 2, "p:lease:{t1}": 2, "p:handoff:i-1": 1, "p:lim:{h}:c:cap": 2}
	for k, n := range want {
		if m.Keys[k] != n {
			t.Errorf("key %s: %d, want %d (all %v)", k, m.Keys[k], n, m.Keys)
		}
	}
	if len(m.Keys) != len(want) {
		t.Errorf("keys %v, want %v", m.Keys, want)
	}
	if got := splitMonitorArgs(`"a \"b\"" "\x41\\" ""`); !slices.Equal(got, []string{`a "b"`, `A\`, ""}) {
		t.Errorf("split: %q", got)
	}
}

// TestRedisDelta: the run's costs leave the MONITOR window out.
func TestRedisDelta(t *testing.T) {
	a := redisSnap{cmds: map[string]redisCmd{"evalsha": {Calls: 10, Usec: 100}}, cpu: 1}
	b := redisSnap{cmds: map[string]redisCmd{"evalsha": {Calls: 50, Usec: 500}, "set": {Calls: 5, Usec: 5}}, cpu: 3}
	win := redisDelta{CPUSeconds: 0.5, ByCommand: map[string]redisCmd{"evalsha": {Calls: 20, Usec: 200}}}
	d := a.to(b).minus(win)
	if d.Commands != 25 || d.ByCommand["evalsha"].Calls != 20 || d.ByCommand["set"].Calls != 5 || d.CPUSeconds != 1.5 {
		t.Errorf("delta %+v", d)
	}
}

// TestRedisSnapAddsNodes: one node's INFO after another is summed: the
// commands (but the simulation's own INFO and MONITOR), the CPU, the
// clients, the blocked clients and the connections received.
func TestRedisSnapAddsNodes(t *testing.T) {
	s := newRedisSnap()
	for _, info := range []string{
		"# Clients\r\nconnected_clients:3\r\nblocked_clients:1\r\n# Stats\r\ntotal_connections_received:7\r\n# CPU\r\nused_cpu_sys:0.5\r\nused_cpu_user:0.25\r\n# Commandstats\r\ncmdstat_hello:calls=2,usec=10,usec_per_call=5.00\r\ncmdstat_info:calls=9,usec=90\r\n",
		"connected_clients:4\r\nblocked_clients:0\r\ntotal_connections_received:5\r\nused_cpu_sys:1\r\ncmdstat_hello:calls=1,usec=4\r\ncmdstat_monitor:calls=1,usec=1\r\n",
	} {
		s.add(info)
	}
	if s.clients != 7 || s.blocked != 1 || s.connections != 12 || s.cpu != 1.75 {
		t.Errorf("clients %d, blocked %d, connections %d, cpu %v; want 7, 1, 12, 1.75", s.clients, s.blocked, s.connections, s.cpu)
	}
	if got := s.cmds["hello"]; got != (redisCmd{Calls: 3, Usec: 14}) || len(s.cmds) != 1 {
		t.Errorf("commands %v; want hello 3 calls, 14 µs, and nothing else", s.cmds)
	}
}
