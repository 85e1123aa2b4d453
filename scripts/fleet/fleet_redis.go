package main

import (
	"bufio"
	"context"
	"crypto/sha1" //nolint:gosec // Redis names a script by the SHA-1 of its text
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/harness"
)

// Where the fleet's Redis cost goes: INFO commandstats per command over an
// idle window (agents up, no tasks) and over the run, and a MONITOR window
// in the middle of the run that names each EVALSHA's script, counts the
// commands each script runs and counts commands per key. MONITOR costs
// Redis CPU itself: the run's per-task figures leave its window out.

// redisNodes is every node the fleet's Redis is made of: one server, or
// each master of a Cluster.
type redisNodes []*redis.Client

// redisSnap is INFO commandstats, cpu, clients and stats summed over the
// nodes.
type redisSnap struct {
	at   time.Time
	cmds map[string]redisCmd
	cpu  float64 // used_cpu_sys + used_cpu_user, seconds
	// connected_clients, blocked_clients, total_connections_received
	clients, blocked, connections int64
}

type redisCmd struct {
	Calls int64 `json:"calls"`
	Usec  int64 `json:"usec"`
}

// snapInfo is the INFO sections a redisSnap is made of.
var snapInfo = []string{"commandstats", "cpu", "clients", "stats"}

func (ns redisNodes) snap() (redisSnap, error) {
	s := newRedisSnap()
	for _, c := range ns {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := c.Info(ctx, snapInfo...).Result()
		cancel()
		if err != nil {
			return s, fmt.Errorf("redis info: %w", err)
		}
		s.add(info)
	}
	return s, nil
}

func newRedisSnap() redisSnap { return redisSnap{at: time.Now(), cmds: map[string]redisCmd{}} }

// add sums one node's INFO (snapInfo) into s.
func (s *redisSnap) add(info string) {
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			cmd := strings.TrimPrefix(name, "cmdstat_")
			if cmd == "info" || cmd == "monitor" {
				continue // the simulation's own
			}
			var rc redisCmd
			for _, kv := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "calls":
					rc.Calls = parseInt(v)
				case "usec":
					rc.Usec = parseInt(v)
				}
			}
			c := s.cmds[cmd]
			c.Calls += rc.Calls
			c.Usec += rc.Usec
			s.cmds[cmd] = c
		case name == "used_cpu_sys" || name == "used_cpu_user":
			f, _ := strconv.ParseFloat(rest, 64)
			s.cpu += f
		case name == "connected_clients":
			s.clients += parseInt(rest)
		case name == "blocked_clients":
			s.blocked += parseInt(rest)
		case name == "total_connections_received":
			s.connections += parseInt(rest)
		}
	}
}

// redisDelta is the cost between two snaps.
type redisDelta struct {
	Seconds    float64             `json:"seconds"`
	CPUSeconds float64             `json:"cpu_seconds"`
	Commands   int64               `json:"commands"`
	ByCommand  map[string]redisCmd `json:"by_command"`
}

func (a redisSnap) to(b redisSnap) redisDelta {
	d := redisDelta{Seconds: b.at.Sub(a.at).Seconds(), CPUSeconds: b.cpu - a.cpu, ByCommand: map[string]redisCmd{}}
	for k, v := range b.cmds {
		w := redisCmd{Calls: v.Calls - a.cmds[k].Calls, Usec: v.Usec - a.cmds[k].Usec}
		if w.Calls > 0 {
			d.ByCommand[k] = w
			d.Commands += w.Calls
		}
	}
	return d
}

func (d redisDelta) minus(e redisDelta) redisDelta {
	out := redisDelta{Seconds: d.Seconds - e.Seconds, CPUSeconds: d.CPUSeconds - e.CPUSeconds, ByCommand: map[string]redisCmd{}}
	for k, v := range d.ByCommand {
		w := redisCmd{Calls: v.Calls - e.ByCommand[k].Calls, Usec: v.Usec - e.ByCommand[k].Usec}
		if w.Calls > 0 {
			out.ByCommand[k] = w
			out.Commands += w.Calls
		}
	}
	return out
}

// redisProfiler takes the snaps and runs the MONITOR window.
type redisProfiler struct {
	nodes   redisNodes
	addrs   []string
	scripts map[string]string // SHA-1 → script file name
	agents  int

	bareFrom, bareTo                          redisSnap // before the agents start
	idleFrom, idleTo, runFrom, monFrom, monTo redisSnap
	mon                                       *monitorCount
	monErr                                    error
	wg                                        sync.WaitGroup
}

func newRedisProfiler(addrs []string, agents int) *redisProfiler {
	p := &redisProfiler{addrs: addrs, agents: agents, scripts: luaScripts("agent", "limiter")}
	for _, a := range addrs {
		p.nodes = append(p.nodes, redis.NewClient(&redis.Options{Addr: a}))
	}
	return p
}

func (p *redisProfiler) close() {
	p.wg.Wait()
	for _, c := range p.nodes {
		_ = c.Close()
	}
}

// bare measures the server(s) with no agent for d: what Redis costs on
// its own (its cron), left out of nothing but shown beside the rest.
func (p *redisProfiler) bare(d time.Duration) error {
	var err error
	if p.bareFrom, err = p.nodes.snap(); err != nil {
		return err
	}
	time.Sleep(d)
	p.bareTo, err = p.nodes.snap()
	return err
}

// idle measures the fleet with no tasks for d.
func (p *redisProfiler) idle(d time.Duration) error {
	var err error
	if p.idleFrom, err = p.nodes.snap(); err != nil {
		return err
	}
	time.Sleep(d)
	p.idleTo, err = p.nodes.snap()
	return err
}

// start marks the run's start and schedules the MONITOR window: from
// after to after+window.
func (p *redisProfiler) start(after, window time.Duration) error {
	var err error
	if p.runFrom, err = p.nodes.snap(); err != nil {
		return err
	}
	if window <= 0 {
		return nil
	}
	p.wg.Go(func() {
		time.Sleep(after)
		p.mon, p.monFrom, p.monTo, p.monErr = p.monitor(window)
	})
	return nil
}

// monitor reads MONITOR on every node for window.
func (p *redisProfiler) monitor(window time.Duration) (*monitorCount, redisSnap, redisSnap, error) {
	mc := newMonitorCount(p.scripts)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for _, a := range p.addrs {
		c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(context.Background(), "tcp", a)
		if err != nil {
			return nil, redisSnap{}, redisSnap{}, fmt.Errorf("monitor %s: %w", a, err)
		}
		conns = append(conns, c)
	}
	from, err := p.nodes.snap()
	if err != nil {
		return nil, from, from, err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	deadline := time.Now().Add(window)
	for _, c := range conns {
		if _, err := io.WriteString(c, "MONITOR\r\n"); err != nil {
			return nil, from, from, fmt.Errorf("monitor: %w", err)
		}
		_ = c.SetReadDeadline(deadline)
		wg.Go(func() {
			br := bufio.NewReaderSize(c, 1<<20)
			var local monitorCount
			local.init(p.scripts)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					break
				}
				local.add(line)
			}
			mu.Lock()
			mc.merge(&local)
			mu.Unlock()
		})
	}
	wg.Wait()
	to, err := p.nodes.snap()
	return mc, from, to, err
}

// luaScripts maps the SHA-1 of every .lua file under dirs to its path.
func luaScripts(dirs ...string) map[string]string {
	out := map[string]string{}
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".lua") {
				return nil //nolint:nilerr // a file that cannot be read is named by its SHA
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil //nolint:nilerr // see above
			}
			sum := sha1.Sum(b) //nolint:gosec // see import
			out[hex.EncodeToString(sum[:])] = path
			if filepath.Base(path) == "allow.lua" {
				// The agent's claim with the decision in its script.
				out[state.ClaimThenHash(string(b))] = "lua/claim.lua+" + path
			}
			if filepath.Base(path) == "held.lua" {
				// The agent's finish with the slot release in its script.
				out[state.FinishThenHash(string(b))] = "lua/finish.lua+" + path
			}
			return nil
		})
	}
	return out
}

// monitorCount is what a MONITOR window saw.
type monitorCount struct {
	scripts  map[string]string
	Commands int64                  `json:"commands"`
	Scripts  map[string]*scriptStat `json:"scripts"`
	Keys     map[string]int64       `json:"-"`
	cur      *scriptStat            // the script whose commands follow
}

type scriptStat struct {
	Calls    int64            `json:"calls"`
	Commands map[string]int64 `json:"commands"` // run inside it
}

func newMonitorCount(scripts map[string]string) *monitorCount {
	var m monitorCount
	m.init(scripts)
	return &m
}

func (m *monitorCount) init(scripts map[string]string) {
	m.scripts, m.Scripts, m.Keys = scripts, map[string]*scriptStat{}, map[string]int64{}
}

func (m *monitorCount) merge(o *monitorCount) {
	m.Commands += o.Commands
	for k, v := range o.Scripts {
		s := m.script(k)
		s.Calls += v.Calls
		for c, n := range v.Commands {
			s.Commands[c] += n
		}
	}
	for k, v := range o.Keys {
		m.Keys[k] += v
	}
}

func (m *monitorCount) script(name string) *scriptStat {
	s := m.Scripts[name]
	if s == nil {
		s = &scriptStat{Commands: map[string]int64{}}
		m.Scripts[name] = s
	}
	return s
}

// add counts one MONITOR line: `<time> [<db> <client>|lua] "CMD" "arg"…`.
// Redis feeds an EVALSHA to MONITOR before the commands its script runs,
// and nothing else comes between them (a script is atomic).
func (m *monitorCount) add(line string) {
	open := strings.IndexByte(line, '[')
	shut := strings.IndexByte(line, ']')
	if open < 0 || shut < open {
		return
	}
	args := splitMonitorArgs(line[shut+1:])
	if len(args) == 0 {
		return
	}
	cmd := strings.ToLower(args[0])
	if cmd == "info" || cmd == "monitor" {
		return
	}
	m.Commands++
	for _, k := range commandKeys(cmd, args[1:]) {
		m.Keys[k]++
	}
	if strings.HasSuffix(line[open:shut], " lua") {
		if m.cur != nil {
			m.cur.Commands[cmd]++
		}
		return
	}
	m.cur = nil
	if (cmd == "evalsha" || cmd == "eval") && len(args) > 1 {
		name := args[1]
		if cmd == "eval" {
			sum := sha1.Sum([]byte(args[1])) //nolint:gosec // see import
			name = hex.EncodeToString(sum[:])
		}
		if n, ok := m.scripts[name]; ok {
			name = filepath.Base(filepath.Dir(n)) + "/" + filepath.Base(n)
		} else if len(name) > 12 {
			name = name[:12]
		}
		m.cur = m.script(name)
		m.cur.Calls++
	}
}

// commandKeys is where the keys are in the commands the agents send.
func commandKeys(cmd string, args []string) []string {
	switch cmd {
	case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall":
		if len(args) < 2 {
			return nil
		}
		n, _ := strconv.Atoi(args[1])
		return args[2:min(len(args), 2+n)]
	case "xread", "xreadgroup":
		for i, a := range args {
			if strings.EqualFold(a, "streams") {
				rest := args[i+1:]
				return rest[:len(rest)/2]
			}
		}
		return nil
	case "del", "unlink", "exists", "mget", "touch", "watch":
		return args
	case "ping", "hello", "client", "script", "config", "select", "cluster", "readonly", "command", "time", "auth", "multi", "exec", "discard", "quit":
		return nil
	}
	if len(args) == 0 {
		return nil
	}
	return args[:1]
}

// splitMonitorArgs reads the quoted, escaped arguments of a MONITOR line.
func splitMonitorArgs(s string) []string {
	var out []string
	for i := 0; i < len(s); i++ {
		if s[i] != '"' {
			continue
		}
		var b strings.Builder
		for i++; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				case 'x':
					if i+2 < len(s) {
						if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
							b.WriteByte(byte(v))
							i += 2
							continue
						}
					}
					b.WriteByte('x')
				default:
					b.WriteByte(s[i])
				}
				continue
			}
			b.WriteByte(s[i])
		}
		out = append(out, b.String())
	}
	return out
}

// redisRes is the "redis" part of fleetsim.json.
type redisRes struct {
	Nodes int `json:"nodes"`
	// BareCPUUsecPerSecond is the server(s) with no client: Redis's own
	// cron, a fixed cost spread over the tasks of the run.
	BareCPUUsecPerSecond float64 `json:"bare_cpu_usec_per_second"`
	// Idle: agents up, no task sent; per agent per minute.
	Idle                    redisDelta `json:"idle"`
	IdleCommandsPerAgentMin float64    `json:"idle_commands_per_agent_minute"`
	IdleCPUUsecPerAgentMin  float64    `json:"idle_cpu_usec_per_agent_minute"`
	// Run: from the first task sent to the end of the settle, the MONITOR
	// window left out; per task sent outside that window.
	Run                    redisDelta `json:"run"`
	Tasks                  int        `json:"tasks"`
	CommandsPerTask        float64    `json:"commands_per_task"`
	CPUUsecPerTask         float64    `json:"cpu_usec_per_task"`
	CommandUsecPerTask     float64    `json:"command_usec_per_task"` // INFO's usec: inside commands, no I/O
	IdleShareOfRunCommands float64    `json:"idle_share_of_run_commands"`
	// The MONITOR window: which scripts, which keys.
	Monitor        *monitorCount `json:"monitor,omitempty"`
	MonitorSeconds float64       `json:"monitor_seconds,omitempty"`
	MonitorError   string        `json:"monitor_error,omitempty"`
	TopKeys        []keyShare    `json:"top_keys,omitempty"`
}

type keyShare struct {
	Key   string  `json:"key"`
	Count int64   `json:"count"`
	Share float64 `json:"share"`
}

// report computes the table; end is the snap at the end of the run and
// sent the times the tasks were sent.
func (p *redisProfiler) report(end redisSnap, sent []time.Time) *redisRes {
	p.wg.Wait()
	rr := &redisRes{Nodes: len(p.nodes)}
	if b := p.bareFrom.to(p.bareTo); b.Seconds > 0 {
		rr.BareCPUUsecPerSecond = b.CPUSeconds * 1e6 / b.Seconds
	}
	rr.Idle = p.idleFrom.to(p.idleTo)
	if m := rr.Idle.Seconds / 60 * float64(p.agents); m > 0 {
		rr.IdleCommandsPerAgentMin = float64(rr.Idle.Commands) / m
		rr.IdleCPUUsecPerAgentMin = (rr.Idle.CPUSeconds*1e6 - rr.BareCPUUsecPerSecond*rr.Idle.Seconds) / m
	}
	rr.Run = p.runFrom.to(end)
	rr.Tasks = len(sent)
	if p.mon != nil {
		mon := p.monFrom.to(p.monTo)
		rr.Run = rr.Run.minus(mon)
		for _, t := range sent {
			if !t.Before(p.monFrom.at) && t.Before(p.monTo.at) {
				rr.Tasks--
			}
		}
		rr.Monitor, rr.MonitorSeconds = p.mon, mon.Seconds
		for k, n := range p.mon.Keys {
			rr.TopKeys = append(rr.TopKeys, keyShare{Key: k, Count: n, Share: float64(n) / float64(max(1, p.mon.Commands))})
		}
		sort.Slice(rr.TopKeys, func(i, j int) bool {
			if rr.TopKeys[i].Count != rr.TopKeys[j].Count {
				return rr.TopKeys[i].Count > rr.TopKeys[j].Count
			}
			return rr.TopKeys[i].Key < rr.TopKeys[j].Key
		})
		rr.TopKeys = rr.TopKeys[:min(len(rr.TopKeys), 15)]
	}
	if p.monErr != nil {
		rr.MonitorError = p.monErr.Error()
	}
	if n := float64(max(1, rr.Tasks)); true {
		rr.CommandsPerTask = float64(rr.Run.Commands) / n
		rr.CPUUsecPerTask = rr.Run.CPUSeconds * 1e6 / n
		var us int64
		for _, c := range rr.Run.ByCommand {
			us += c.Usec
		}
		rr.CommandUsecPerTask = float64(us) / n
	}
	if rr.Idle.Seconds > 0 && rr.Run.Commands > 0 {
		rr.IdleShareOfRunCommands = float64(rr.Idle.Commands) / rr.Idle.Seconds * rr.Run.Seconds / float64(rr.Run.Commands)
	}
	return rr
}

// hotKey is the busiest key that is not a per-host limiter key, and its
// share of the window's commands.
func (rr *redisRes) hotKey() (string, float64) {
	for _, k := range rr.TopKeys {
		if !strings.Contains(k.Key, "lim:{") {
			return k.Key, k.Share
		}
	}
	return "", 0
}

// print writes the Redis tables of docs/RESULTS.md.
func (rr *redisRes) print(w io.Writer) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Redis (%d node(s)): %.1f commands and %.0f µs CPU per task (%d tasks over %.0f s%s), of which %.0f µs the bare server's own (%.0f µs/s with no client); idle: %.1f commands and %.0f µs CPU per agent per minute (%.0f s, no tasks, the bare server's share left out), %.0f %% of the run's commands.\n",
		rr.Nodes, rr.CommandsPerTask, rr.CPUUsecPerTask, rr.Tasks, rr.Run.Seconds, monitorNote(rr), rr.BareCPUUsecPerSecond*rr.Run.Seconds/float64(max(1, rr.Tasks)), rr.BareCPUUsecPerSecond,
		rr.IdleCommandsPerAgentMin, rr.IdleCPUUsecPerAgentMin, rr.Idle.Seconds, 100*rr.IdleShareOfRunCommands)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| command | calls per task | µs per call (in command) | idle calls per agent per minute |")
	fmt.Fprintln(w, "|---|---|---|---|")
	n := float64(max(1, rr.Tasks))
	perMin := func(c string) float64 {
		if rr.Idle.Seconds <= 0 || rr.IdleCommandsPerAgentMin == 0 {
			return 0
		}
		return float64(rr.Idle.ByCommand[c].Calls) / float64(max(1, rr.Idle.Commands)) * rr.IdleCommandsPerAgentMin
	}
	for _, c := range sortedCmds(rr.Run.ByCommand, rr.Idle.ByCommand) {
		v := rr.Run.ByCommand[c]
		per := 0.0
		if v.Calls > 0 {
			per = float64(v.Usec) / float64(v.Calls)
		}
		fmt.Fprintf(w, "| %s | %.2f | %.1f | %.2f |\n", c, float64(v.Calls)/n, per, perMin(c))
	}
	if rr.Monitor != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Scripts in the MONITOR window (%.0f s, %d commands):\n\n", rr.MonitorSeconds, rr.Monitor.Commands)
		fmt.Fprintln(w, "| script | EVALSHA calls | commands inside, per call |")
		fmt.Fprintln(w, "|---|---|---|")
		names := make([]string, 0, len(rr.Monitor.Scripts))
		for k := range rr.Monitor.Scripts {
			names = append(names, k)
		}
		sort.Slice(names, func(i, j int) bool { return rr.Monitor.Scripts[names[i]].Calls > rr.Monitor.Scripts[names[j]].Calls })
		for _, k := range names {
			s := rr.Monitor.Scripts[k]
			var parts []string
			for _, c := range sortedCmds2(s.Commands) {
				parts = append(parts, fmt.Sprintf("%s %.2f", c, float64(s.Commands[c])/float64(max(1, s.Calls))))
			}
			fmt.Fprintf(w, "| %s | %d | %s |\n", k, s.Calls, strings.Join(parts, ", "))
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| key (top of the MONITOR window) | commands | share |")
		fmt.Fprintln(w, "|---|---|---|")
		for _, k := range rr.TopKeys {
			fmt.Fprintf(w, "| `%s` | %d | %.2f %% |\n", k.Key, k.Count, 100*k.Share)
		}
		if k, share := rr.hotKey(); k != "" {
			fmt.Fprintf(w, "\nBusiest key other than a limiter key: `%s`, %.2f %% of the window's commands (target ≤ 1 %%).\n", k, 100*share)
		}
	}
	if rr.MonitorError != "" {
		fmt.Fprintf(w, "\nMONITOR failed: %s\n", rr.MonitorError)
	}
}

func monitorNote(rr *redisRes) string {
	if rr.Monitor == nil {
		return ""
	}
	return fmt.Sprintf(", the %.0f s MONITOR window left out", rr.MonitorSeconds)
}

func sortedCmds(ms ...map[string]redisCmd) []string {
	seen := map[string]int64{}
	for i, m := range ms {
		for k, v := range m {
			if i == 0 {
				seen[k] += v.Calls
			} else if _, ok := seen[k]; !ok {
				seen[k] = 0
			}
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if seen[keys[i]] != seen[keys[j]] {
			return seen[keys[i]] > seen[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

func sortedCmds2(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// redisOpts are the fleet's flags for the Redis profile.
type redisOpts struct {
	redisIdle    time.Duration // the idle window before the first task
	redisMonitor time.Duration // the MONITOR window; 0 = none
	redisCluster bool          // the agents share a 3-master Cluster
	auditShards  int           // redis.audit_shards of the agents; 0 = the default
	instShards   int           // redis.instance_shards of the agents; 0 = the default
}

func (o *redisOpts) flags(fs *flag.FlagSet) {
	fs.DurationVar(&o.redisIdle, "redis-idle", durEnv("FLEETSIM_REDIS_IDLE", 30*time.Second), "idle window measured before the first task (FLEETSIM_REDIS_IDLE)")
	fs.BoolVar(&o.redisCluster, "redis-cluster", os.Getenv("FLEETSIM_REDIS_CLUSTER") == "1", "a 3-master Redis Cluster of the lab's own (internal/harness) instead of one redis-server (FLEETSIM_REDIS_CLUSTER=1)")
	fs.IntVar(&o.auditShards, "audit-shards", intEnv("FLEETSIM_AUDIT_SHARDS", 0), "the agents' redis.audit_shards; 0 = the default (FLEETSIM_AUDIT_SHARDS)")
	fs.IntVar(&o.instShards, "instance-shards", intEnv("FLEETSIM_INSTANCE_SHARDS", 0), "the agents' redis.instance_shards; 0 = the default (FLEETSIM_INSTANCE_SHARDS)")
	fs.DurationVar(&o.redisMonitor, "redis-monitor", durEnv("FLEETSIM_REDIS_MONITOR", 10*time.Second), "MONITOR window at 30 % of the duration, naming scripts and keys; 0 = none (FLEETSIM_REDIS_MONITOR)")
}

func intEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func durEnv(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// end reads the run's last snap and computes the report.
func (p *redisProfiler) end(sent []sentTask) (*redisRes, redisSnap, error) {
	p.wg.Wait()
	s, err := p.nodes.snap()
	if err != nil {
		return nil, s, err
	}
	at := make([]time.Time, len(sent))
	for i, st := range sent {
		at[i] = st.at
	}
	return p.report(s, at), s, nil
}

// fleetRedis is the fleet's Redis, the lab's own: one redis-server, or
// with -redis-cluster a Cluster of fleetClusterMasters masters
// (harness.StartRedisCluster). The lab stops it.
type fleetRedis struct {
	addrs       []string // every master
	cluster     bool
	auditShards int // redis.audit_shards; 0 = the default
	instShards  int // redis.instance_shards; 0 = the default
}

// fleetClusterMasters is the size of the -redis-cluster Cluster.
const fleetClusterMasters = 3

func startFleetRedis(l *harness.Lab, cluster bool) (*fleetRedis, error) {
	if !cluster {
		rs, err := l.StartRedis("fleet")
		if err != nil {
			return nil, err
		}
		return &fleetRedis{addrs: []string{rs.Addr}}, nil
	}
	c, err := l.StartRedisCluster("fleet", fleetClusterMasters)
	if err != nil {
		return nil, err
	}
	f := &fleetRedis{addrs: c.Addrs(), cluster: true}
	logf("redis cluster: %s", strings.Join(f.addrs, ","))
	return f, nil
}

// config points an agent's config at the fleet's Redis: redis.url, or
// redis.addrs on a Cluster.
func (f *fleetRedis) config(c harness.AgentConfig) harness.AgentConfig {
	c.AuditShards, c.InstShards = f.auditShards, f.instShards
	if f.cluster {
		c.RedisAddrs = f.addrs
	} else {
		c.RedisAddr = f.addrs[0]
	}
	return c
}

// usage is the old cost rows' part of a snap.
func (s redisSnap) usage() redisUsage {
	u := redisUsage{cpu: s.cpu}
	for _, c := range s.cmds {
		u.commands += c.Calls
	}
	return u
}

func parseInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
