package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// healthEvery is how often the run samples Redis's clients and the
// machine's load, from the agents' start to the end: what a run that
// collapses (a reconnect storm) leaves to read.
const healthEvery = 5 * time.Second

// healthSample is one sample: Redis's INFO summed over its nodes and the
// machine's load average.
type healthSample struct {
	Second       float64 `json:"second"` // since the agents' start
	Load1        float64 `json:"load1"`
	Clients      int64   `json:"connected_clients"`
	Blocked      int64   `json:"blocked_clients"`
	Connections  int64   `json:"total_connections_received"`
	Hello        int64   `json:"hello_calls"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	InfoMillis   float64 `json:"info_ms"` // how long INFO took to answer: Redis's latency, seen from outside
	Unreachable  bool    `json:"unreachable,omitempty"`
	AgentsExited int     `json:"agents_exited"`
}

// health keeps the samples.
type health struct {
	mu      sync.Mutex
	start   time.Time
	samples []healthSample
}

func (h *health) all() []healthSample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.samples)
}

// sampleHealth samples every healthEvery until ctx ends, and logs a line
// every sixth sample, and each sample while Redis is slow (INFO took
// over 100 ms) or the load is past 50 (1,000 agents on two cores run at
// 10–15), so that a run going wrong is seen as it does.
func (r *fleetRun) sampleHealth(ctx context.Context, nodes redisNodes) {
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for n := 0; ; n++ {
		s := r.healthSample(ctx, nodes)
		r.health.mu.Lock()
		prev := s
		if k := len(r.health.samples); k > 0 {
			prev = r.health.samples[k-1]
		}
		r.health.samples = append(r.health.samples, s)
		r.health.mu.Unlock()
		if n%6 == 0 || s.InfoMillis > 100 || s.Load1 > 50 || s.Unreachable {
			logf("health: load %.1f, Redis %d clients (%d blocked), +%d connections (+%d HELLO) in %s, INFO in %.0f ms",
				s.Load1, s.Clients, s.Blocked, s.Connections-prev.Connections, s.Hello-prev.Hello,
				secs(time.Duration((s.Second-prev.Second)*float64(time.Second))), s.InfoMillis)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *fleetRun) healthSample(ctx context.Context, nodes redisNodes) healthSample {
	s := healthSample{Second: time.Since(r.health.start).Seconds(), Load1: load1()}
	for _, fa := range r.agents {
		if fa.Agent != nil && !fa.Alive() {
			s.AgentsExited++
		}
	}
	began := time.Now()
	snap := newRedisSnap()
	for _, c := range nodes {
		ictx, cancel := context.WithTimeout(ctx, healthEvery)
		info, err := c.Info(ictx, snapInfo...).Result()
		cancel()
		if err != nil {
			s.Unreachable = true
			continue
		}
		snap.add(info)
	}
	s.Clients, s.Blocked, s.Connections = snap.clients, snap.blocked, snap.connections
	s.Hello, s.CPUSeconds = snap.cmds["hello"].Calls, snap.cpu
	s.InfoMillis = float64(time.Since(began).Microseconds()) / 1000
	return s
}

// load1 is the machine's one-minute load average; 0 when unknown.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

// logCount is how many lines of one level and message the agents logged.
type logCount struct {
	Level  string `json:"level"`
	Msg    string `json:"msg"`
	Lines  int    `json:"lines"`
	Agents int    `json:"agents"`
	First  string `json:"first"` // time of the first such line
	Err    string `json:"example_err,omitempty"`
}

// agentWarnings counts the warning and error lines of every agent log in
// dir (the lab's: *.stderr.jsonl), by level and message, most frequent
// first.
func agentWarnings(dir string) []logCount {
	files, _ := filepath.Glob(filepath.Join(dir, "*.stderr.jsonl"))
	counts := map[[2]string]*logCount{}
	for _, f := range files {
		seen := map[[2]string]bool{}
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var l struct {
				Time  string `json:"time"`
				Level string `json:"level"`
				Msg   string `json:"msg"`
				Err   string `json:"err"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || (l.Level != "WARN" && l.Level != "ERROR") {
				continue
			}
			k := [2]string{l.Level, l.Msg}
			c := counts[k]
			if c == nil {
				c = &logCount{Level: l.Level, Msg: l.Msg, First: l.Time, Err: l.Err}
				counts[k] = c
			}
			c.Lines++
			if l.Time < c.First {
				c.First = l.Time
			}
			if !seen[k] {
				seen[k] = true
				c.Agents++
			}
		}
		fh.Close()
	}
	out := make([]logCount, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b logCount) int { return cmp.Or(b.Lines-a.Lines, strings.Compare(a.Msg, b.Msg)) })
	return out
}

// failure is what a run that could not finish leaves: why, the health
// samples up to then and what the agents warned of.
type failure struct {
	Date     string         `json:"date"`
	Params   fleetParam     `json:"params"`
	Error    string         `json:"error"`
	Health   []healthSample `json:"health"`
	Warnings []logCount     `json:"agent_warnings"`
}

// writeFailure writes dir/fleetsim-failed.json and prints its summary:
// the last samples and the agents' most frequent warnings.
func writeFailure(dir string, f failure, w io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "fleetsim-failed.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(w, "The run failed: %s\n\n| second | load | clients | blocked | connections | HELLO | INFO ms |\n|---|---|---|---|---|---|---|\n", f.Error)
	for _, s := range f.Health[max(0, len(f.Health)-12):] {
		fmt.Fprintf(w, "| %.0f | %.1f | %d | %d | %d | %d | %.0f |\n", s.Second, s.Load1, s.Clients, s.Blocked, s.Connections, s.Hello, s.InfoMillis)
	}
	printWarnings(w, f.Warnings)
	fmt.Fprintf(w, "\nSamples and warnings: %s\n", filepath.Join(dir, "fleetsim-failed.json"))
	return nil
}

// printWarnings prints the 15 most frequent of the agents' warnings and
// errors.
func printWarnings(w io.Writer, ws []logCount) {
	if len(ws) == 0 {
		fmt.Fprintln(w, "\nThe agents logged no warning or error.")
		return
	}
	fmt.Fprintf(w, "\n| level | message | lines | agents | first | example err |\n|---|---|---|---|---|---|\n")
	for _, c := range ws[:min(15, len(ws))] {
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %s |\n", c.Level, c.Msg, c.Lines, c.Agents, c.First, c.Err)
	}
}
