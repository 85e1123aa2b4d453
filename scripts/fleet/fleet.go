package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/harness"
)

// The fleet simulation (scripts/fleetsim): N real agents on
// one task queue, one lifecycle queue, one Auto Scaling group and one
// redis-server, living through a freeze, a scale-in through lifecycle
// hooks and abrupt kills while a steady, long-tailed workload flows.
const (
	fleetVisibility = 30 * time.Second // queue.visibility_timeout: the execution lease
	// fleetHookTTL is the terminating hook's heartbeat timeout; a notice on
	// the shared lifecycle queue goes round every agent until its owner
	// takes it, so it must outlast that round by far (lifecycle/doc.go).
	fleetHookTTL   = 2 * time.Minute
	fleetBeat      = 20 * time.Second // heartbeat_interval < fleetHookTTL/2
	fleetMaxRun    = 20 * time.Second // the longest diagnostic run
	fleetHook      = "fleet-drain"
	fleetGroup     = "asg-fleet"
	fleetStartJobs = 8 // agents started at once
	// fleetStopWait bounds an agent's exit after SIGTERM: its longest run
	// plus the completion's retries.
	fleetStopWait = fleetMaxRun + 40*time.Second
)

// The limiter rules every agent enforces, one per diagnostic, and what the
// marks are checked against.
const (
	fleetCap         = 3               // quick: runs at once per host
	fleetQuota       = 5               // disk: runs per host per day
	fleetMinInterval = 5 * time.Second // trace: between runs per host
	fleetWindowCount = 10              // netstat: runs per host per window
	fleetWindow      = time.Minute
)

var fleetRules = fmt.Sprintf(`    - name: cap
      match: {diagnostic: [quick]}
      key: host
      limits: [{concurrency: %d}]
      on_exceed: defer
    - name: quota
      match: {diagnostic: [disk]}
      key: host
      limits: [{daily: %d}]
      on_exceed: drop
    - name: spacing
      match: {diagnostic: [trace]}
      key: host
      limits: [{min_interval: %s}]
      on_exceed: drop
    - name: burst
      match: {diagnostic: [netstat]}
      key: host
      limits: [{window: {count: %d, per: %s}}]
      on_exceed: drop
`, fleetCap, fleetQuota, fleetMinInterval, fleetWindowCount, fleetWindow)

var fleetDiagnostics = []string{"quick", "disk", "trace", "netstat"}

type fleetOpts struct {
	agents   int
	duration time.Duration
	rate     float64
	hosts    int
	workers  int
	scaleIn  float64
	kill     float64
	settle   time.Duration
	freeze   time.Duration // how long the frozen agent stays stopped
	memLimit string
	out      string
	seed     uint64
	// senders is how many Terminates of the scale-in run at once (each
	// sends its notice to the SQS fake with the SDK). One by default, as
	// in the runs before: both 1,000-agent runs with 32 on two cores fell
	// into a Redis reconnect storm (docs/RESULTS.md, 2026-12-02), the
	// second one before its scale-in had begun, so the senders are not
	// shown to be the cause. Each notice's delay counts from its own
	// Terminate, so the pace of the sends is not counted as the agents'.
	senders int
	// stall is how long Redis is held busy in chunks from the scale-in's
	// start (stallRedis); 0 = never.
	stall time.Duration
	// runsOn is the -runs-on mode (fleet_target.go): "" the hosts no agent
	// owns, "any" or "target" the agents' own host names.
	runsOn string
	// even spreads every task evenly over the hosts (the agents' in the
	// -runs-on modes): no hot host, no Zipf skew.
	even bool
	redisOpts
}

// envOr reads a FLEETSIM_* variable as the flag's default.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func parseFleetOpts(args []string) (fleetOpts, error) {
	fs := flag.NewFlagSet("fleetsim", flag.ContinueOnError)
	var o fleetOpts
	var agents, hosts, workers, seed, rate, scaleIn, kill, duration, settle, freeze string
	fs.StringVar(&agents, "agents", envOr("FLEETSIM_AGENTS", "200"), "agents (FLEETSIM_AGENTS)")
	fs.StringVar(&duration, "duration", envOr("FLEETSIM_DURATION", "5m"), "how long tasks are sent (FLEETSIM_DURATION)")
	fs.StringVar(&rate, "rate", envOr("FLEETSIM_RATE", ""), "tasks sent per second (FLEETSIM_RATE; default a quarter of the agents: about one agent in five busy)")
	fs.StringVar(&hosts, "hosts", envOr("FLEETSIM_HOSTS", "50"), "hosts the tasks are about (FLEETSIM_HOSTS)")
	fs.StringVar(&workers, "workers", envOr("FLEETSIM_WORKERS", "2"), "workers per agent (FLEETSIM_WORKERS)")
	fs.StringVar(&scaleIn, "scale-in", envOr("FLEETSIM_SCALE_IN", "0.30"), "share of agents scaled in through the lifecycle hook")
	fs.StringVar(&kill, "kill", envOr("FLEETSIM_KILL", "0.05"), "share of agents killed with SIGKILL")
	fs.StringVar(&settle, "settle", envOr("FLEETSIM_SETTLE", "3m"), "longest wait for the queue to empty after sending stops")
	fs.StringVar(&freeze, "freeze", envOr("FLEETSIM_FREEZE", (fleetVisibility+15*time.Second).String()), "how long one agent stays stopped (past its visibility timeout of "+fleetVisibility.String()+")")
	fs.StringVar(&o.memLimit, "memlimit", envOr("FLEETSIM_GOMEMLIMIT", "48MiB"), "GOMEMLIMIT of each agent")
	fs.StringVar(&o.out, "out", envOr("FLEETSIM_OUT", "docs/results"), "directory of fleetsim.json and the SVGs")
	fs.StringVar(&seed, "seed", envOr("FLEETSIM_SEED", "1"), "seed of the workload and of the choice of agents")
	fs.IntVar(&o.senders, "scale-in-senders", intEnv("FLEETSIM_SCALE_IN_SENDERS", 1), "Terminates of the scale-in sent at once (FLEETSIM_SCALE_IN_SENDERS)")
	fs.DurationVar(&o.stall, "redis-stall", durEnv("FLEETSIM_REDIS_STALL", 0), "from the scale-in on, hold Redis busy this long in chunks of "+fleetStallChunk.String()+" every "+(fleetStallChunk+fleetStallGap).String()+" (a Redis answering late, below the agents' redis.timeout); 0 = never (FLEETSIM_REDIS_STALL)")
	fs.StringVar(&o.runsOn, "runs-on", envOr("FLEETSIM_RUNS_ON", runsOnDefault), "\"\" (tasks for hosts no agent owns), \"any\" (tasks for the agents' own hosts node-NNN, diagnostics that probe {host} wherever received) or \"target\" (the same tasks, runs_on target: each runs on its host's agent, handed to it by the agent that received it) (FLEETSIM_RUNS_ON)")
	fs.BoolVar(&o.even, "even", os.Getenv("FLEETSIM_EVEN") == "1", "spread every task evenly over the hosts: no hot host and no Zipf skew (with -runs-on target a hot host is one agent's work; FLEETSIM_EVEN=1)")
	o.flags(fs)
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("flags: %w", err)
	}
	var errs []error
	atoi := func(name, v string, p *int, lo int) {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo {
			errs = append(errs, fmt.Errorf("-%s %q: want an integer ≥ %d", name, v, lo))
		}
		*p = n
	}
	atof := func(name, v string, p *float64, lo, hi float64) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < lo || f > hi {
			errs = append(errs, fmt.Errorf("-%s %q: want a number in [%g, %g]", name, v, lo, hi))
		}
		*p = f
	}
	dur := func(name, v string, p *time.Duration) {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("-%s %q: want a positive duration", name, v))
		}
		*p = d
	}
	atoi("agents", agents, &o.agents, 4)
	atoi("hosts", hosts, &o.hosts, 1)
	atoi("workers", workers, &o.workers, 1)
	if rate == "" {
		rate = strconv.FormatFloat(float64(max(o.agents, 4))/4, 'f', -1, 64)
	}
	atof("rate", rate, &o.rate, 0.1, 1000)
	atof("scale-in", scaleIn, &o.scaleIn, 0, 0.9)
	atof("kill", kill, &o.kill, 0, 0.5)
	dur("duration", duration, &o.duration)
	dur("settle", settle, &o.settle)
	dur("freeze", freeze, &o.freeze)
	s, err := strconv.ParseUint(seed, 10, 64)
	if err != nil {
		errs = append(errs, fmt.Errorf("-seed %q: %w", seed, err))
	}
	o.seed = s
	// The freeze must end, and the kills land, while tasks are still sent.
	if o.duration < 2*o.freeze {
		errs = append(errs, fmt.Errorf("-duration %s: at least %s (twice the freeze)", o.duration, 2*o.freeze))
	}
	if !slices.Contains([]string{runsOnDefault, runsOnAny, runsOnTarget}, o.runsOn) {
		errs = append(errs, fmt.Errorf("-runs-on %q: want \"\", %q or %q", o.runsOn, runsOnAny, runsOnTarget))
	}
	if o.senders < 1 {
		errs = append(errs, fmt.Errorf("-scale-in-senders %d: want at least 1", o.senders))
	}
	return o, errors.Join(errs...)
}

// fleetAgent is one simulated instance.
type fleetAgent struct {
	*harness.Agent
	inst string
	role string // "" (stays), scaled_in, killed, frozen

	mu     sync.Mutex
	hwmKB  int64     // highest VmHWM seen
	anonKB int64     // highest RssAnon seen: the agent's own pages, not the binary's shared ones
	exitAt time.Time // when it exited (zero while running)
	killed time.Time // when it and its diagnostics were killed
	code   int
	// terminated is when its scale-in began: the Terminate that puts its
	// lifecycle notice on the queue was called (zero unless scaled in).
	terminated time.Time
}

// fleetRun is everything the run saw, for the checks.
type fleetRun struct {
	o       fleetOpts
	t0      time.Time // first task sent
	agents  []*fleetAgent
	asg     *harness.ASG
	marks   string
	sent    []sentTask
	sendOps int // SendMessageBatch calls of the generator

	freezeAt, contAt, scaleAt, killAt, sendStop time.Time
	pending                                     int // task messages left on the queue at the end
	sqsBefore, sqsAfter                         map[string]int
	sqsByQueue                                  map[string]int // the agents' calls per queue
	// sqsEmptyPolls are the agents' long polls that returned nothing: a
	// cost of agents × wall time, not of tasks.
	sqsEmptyPolls int
	sqsAt         time.Time // when sqsAfter was read: the queue empty, or the settle over
	// sqsTaskCalls are the agents' calls on the task queue, each with the
	// tasks of the messages it touched (sqsKinds); msgTask maps a sent
	// message id to its task id.
	sqsTaskCalls            []sqsCall
	msgTask                 map[string]string
	redisBefore, redisAfter redisUsage
	redis                   *redisRes
	notices                 *noticeRes
	health                  health
	stallNodes              redisNodes     // what -redis-stall holds busy
	stalling                sync.WaitGroup // the stall, while it runs
}

type sentTask struct {
	id, host, diag string
	secs           float64
	at             time.Time
}

func runFleetLab(l *harness.Lab, o fleetOpts) (*fleetRun, error) {
	r := &fleetRun{o: o, marks: filepath.Join(l.Dir, "marks"), msgTask: map[string]string{}}
	rs, err := startFleetRedis(l, o.redisCluster)
	if err != nil {
		return nil, err
	}
	rs.auditShards, rs.instShards = o.auditShards, o.instShards
	prof := newRedisProfiler(rs.addrs, o.agents)
	defer prof.close()
	if err := prof.bare(5 * time.Second); err != nil {
		return nil, err
	}
	tasks, err := l.SQS.CreateQueue("fleet-tasks", map[string]string{"VisibilityTimeout": strconv.Itoa(int(fleetVisibility / time.Second))})
	if err != nil {
		return nil, err
	}
	notify, err := l.SQS.CreateQueue("fleet-lifecycle", nil)
	if err != nil {
		return nil, err
	}
	asg, err := l.StartASG(nil, asgfake.Options{Seed: o.seed, Now: time.Now, Notify: l.SQS.Notifier(notify, nil)})
	if err != nil {
		return nil, err
	}
	asg.AddGroup(fleetGroup)
	r.asg = asg
	if err := asg.PutHook(asgfake.Hook{Group: fleetGroup, Name: fleetHook, HeartbeatTimeout: fleetHookTTL, DefaultResult: asgfake.ResultAbandon}); err != nil {
		return nil, fmt.Errorf("asgfake: %w", err)
	}
	script := filepath.Join(l.Dir, "mark.sh")
	if err := os.WriteFile(script, []byte(markScript(r.marks)), 0o644); err != nil {
		return nil, fmt.Errorf("mark script: %w", err)
	}

	// Roles are dealt before the start, from the seed.
	rng := rand.New(rand.NewPCG(o.seed, 0xf1ee7))
	order := rng.Perm(o.agents)
	nScale := int(math.Round(o.scaleIn * float64(o.agents)))
	nKill := int(math.Round(o.kill * float64(o.agents)))
	r.agents = make([]*fleetAgent, o.agents)
	for i := range r.agents {
		r.agents[i] = &fleetAgent{inst: fmt.Sprintf("i-%017x", 0xf1ee70000+i)}
		if err := asg.AddInstance(fleetGroup, r.agents[i].inst); err != nil {
			return nil, fmt.Errorf("asgfake: %w", err)
		}
	}
	for k, i := range order {
		switch {
		case k < nScale:
			r.agents[i].role = "scaled_in"
		case k < nScale+nKill:
			r.agents[i].role = "killed"
		case k == nScale+nKill:
			r.agents[i].role = "frozen"
		}
	}

	logf("starting %d agents (%d workers each, GOMAXPROCS=1, GOMEMLIMIT=%s)", o.agents, o.workers, o.memLimit)
	env := []string{"AWS_ENDPOINT_URL_AUTO_SCALING=" + asg.URL, "GOMAXPROCS=1", "GOMEMLIMIT=" + o.memLimit}
	lifecycleYAML := fmt.Sprintf("lifecycle:\n  sources: [signal, sqs]\n  queue_url: '%s'\n  hook_name: %s\n  hook_heartbeat_timeout: %s\n  heartbeat_interval: %s\n  drain_timeout: 2m\n  queued: release\n",
		notify, fleetHook, fleetHookTTL, fleetBeat)
	started := time.Now()
	r.health.start = started
	healthCtx, stopHealth := context.WithCancel(context.Background())
	var healthy sync.WaitGroup
	healthy.Go(func() { r.sampleHealth(healthCtx, prof.nodes) })
	defer func() { stopHealth(); healthy.Wait() }()
	if err := r.start(l, func(fa *fleetAgent) string {
		return rs.config(harness.AgentConfig{Instance: fa.inst, Workers: o.workers, QueueURL: tasks, Visibility: fleetVisibility,
			WaitTime: 20 * time.Second, Prefix: "fleet:", Rules: fleetRules,
			Catalog: fleetCatalog(script, fa.inst, o.runsOn)}).YAML() + lifecycleYAML
	}, env); err != nil {
		return r, err
	}
	logf("%d agents ready in %s", o.agents, secs(time.Since(started)))

	if err := prof.idle(o.redisIdle); err != nil {
		return r, err
	}
	if err := prof.start(time.Duration(0.3*float64(o.duration)), o.redisMonitor); err != nil {
		return r, err
	}
	r.redisBefore = prof.runFrom.usage()
	r.sqsBefore = l.SQS.Counters()
	sampleCtx, stopSampling := context.WithCancel(context.Background())
	var sampling sync.WaitGroup
	sampling.Go(func() { r.sampleRSS(sampleCtx) })
	defer func() { stopSampling(); sampling.Wait() }()

	r.t0 = time.Now()
	sendCtx, stopSending := context.WithCancel(context.Background())
	var sending sync.WaitGroup
	var sendErr error
	sending.Go(func() { sendErr = r.generate(sendCtx, l, tasks) })

	r.stallNodes = prof.nodes
	defer r.stalling.Wait()
	if err := r.chaos(o); err != nil {
		stopSending()
		sending.Wait()
		return r, err
	}
	stopSending()
	sending.Wait()
	r.sendStop = time.Now()
	if sendErr != nil {
		return r, sendErr
	}
	logf("sent %d tasks; waiting up to %s for the queue to empty", len(r.sent), o.settle)
	harness.Until(o.settle, func() bool {
		v, i, d, _, _ := l.SQS.Stats("fleet-tasks")
		return v+i+d == 0
	})
	v, i, d, _, _ := l.SQS.Stats("fleet-tasks")
	r.pending = v + i + d
	r.sqsAfter = l.SQS.Counters()
	r.sqsAt = time.Now()
	r.sqsByQueue = map[string]int{}
	calls := l.SQS.Calls()
	r.sqsTaskCalls = taskQueueCalls(calls, "fleet-tasks", r.t0, r.msgTask)
	for _, c := range calls {
		if !c.Time.Before(r.t0) && c.Op != "SendMessageBatch" {
			r.sqsByQueue[c.Queue]++
			if c.Op == "ReceiveMessage" && c.N == 0 && c.Status == 200 {
				r.sqsEmptyPolls++
			}
		}
	}
	r.notices = readNotices(l, "fleet-lifecycle")
	var end redisSnap
	if r.redis, end, err = prof.end(r.sent); err != nil {
		return r, err
	}
	r.redisAfter = end.usage()
	r.stopSurvivors()
	return r, nil
}

// start launches every agent, fleetStartJobs at a time, each waiting for
// its "ready" line.
func (r *fleetRun) start(l *harness.Lab, yaml func(*fleetAgent) string, env []string) error {
	sem := make(chan struct{}, fleetStartJobs)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, fa := range r.agents {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			a, err := l.StartAgent(yaml(fa), append(slices.Clone(env), agentEnv(r, fa)...)...)
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				return
			}
			fa.Agent = a
			go func() {
				<-a.Done()
				fa.mu.Lock()
				fa.exitAt, fa.code = time.Now(), a.ExitCode()
				fa.mu.Unlock()
			}()
		})
		mu.Lock()
		failed := len(errs) > 0
		mu.Unlock()
		if failed {
			break
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// agentEnv is what one agent's environment adds to the fleet's: in the
// -runs-on modes its own host name, its canonical one (the agents of one
// machine share its hostname, which no task names).
func agentEnv(r *fleetRun, fa *fleetAgent) []string {
	if r.o.runsOn == runsOnDefault {
		return nil
	}
	return []string{"AUTODIAG_HOST_NAMES=" + nodeName(slices.Index(r.agents, fa))}
}

// fleetEvent is one step of the timeline.
type fleetEvent struct {
	at time.Time
	do func() error
}

// chaos runs the timeline while tasks flow, in time order: the freeze at
// 20 % of the duration (resumed o.freeze later), the scale-in at 45 %,
// the kills at 60 %; it returns when the duration is over.
func (r *fleetRun) chaos(o fleetOpts) error {
	at := func(f float64) time.Time { return r.t0.Add(time.Duration(f * float64(o.duration))) }
	frozen := r.role("frozen")
	freezeAt := at(0.2)
	events := []fleetEvent{
		{freezeAt, func() error {
			for _, fa := range frozen {
				_ = fa.Signal(syscall.SIGSTOP)
			}
			r.freezeAt = time.Now()
			logf("froze %d agent(s) for %s", len(frozen), secs(o.freeze))
			return nil
		}},
		{freezeAt.Add(o.freeze), func() error {
			for _, fa := range frozen {
				_ = fa.Signal(syscall.SIGCONT)
			}
			r.contAt = time.Now()
			logf("resumed the frozen agent(s)")
			return nil
		}},
		{at(0.45), func() error {
			// Each Terminate's time is kept: the notice delay counts from
			// it, not from the scale-in's start (one after the other, the
			// 300 sends at 1,000 agents took 26 s, which the delay counted
			// as the agents').
			r.scaleAt = time.Now()
			if o.stall > 0 {
				r.stalling.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), o.stall)
					defer cancel()
					n := stallRedis(ctx, r.stallNodes)
					logf("redis stall over: %d chunks of %s in %s", n, fleetStallChunk, secs(time.Since(r.scaleAt)))
				})
			}
			var g errgroup.Group
			g.SetLimit(o.senders)
			for _, fa := range r.role("scaled_in") {
				g.Go(func() error {
					fa.mu.Lock()
					fa.terminated = time.Now()
					fa.mu.Unlock()
					if _, err := r.asg.Terminate(fa.inst); err != nil {
						return fmt.Errorf("terminate %s: %w", fa.inst, err)
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				return err
			}
			logf("scale-in: %d instances in Terminating:Wait in %.2f s", len(r.role("scaled_in")), time.Since(r.scaleAt).Seconds())
			return nil
		}},
		{at(0.6), func() error {
			r.killAt = time.Now()
			for _, fa := range r.role("killed") {
				fa.KillTree()
				fa.killed = time.Now()
			}
			logf("killed %d agents (and their diagnostics)", len(r.role("killed")))
			return nil
		}},
		{at(1), func() error { return nil }},
	}
	slices.SortStableFunc(events, func(a, b fleetEvent) int { return a.at.Compare(b.at) })
	for _, e := range events {
		time.Sleep(time.Until(e.at))
		if err := e.do(); err != nil {
			return err
		}
	}
	return nil
}

func (r *fleetRun) role(role string) []*fleetAgent {
	var out []*fleetAgent
	for _, fa := range r.agents {
		if fa.role == role {
			out = append(out, fa)
		}
	}
	return out
}

// stopSurvivors sends SIGTERM to every agent still running (resuming a
// frozen one first) and waits for them; each drains and exits 0.
func (r *fleetRun) stopSurvivors() {
	var wg sync.WaitGroup
	n := 0
	for _, fa := range r.agents {
		if fa.Agent == nil || !fa.Alive() {
			continue
		}
		n++
		_ = fa.Signal(syscall.SIGCONT)
		_ = fa.Signal(syscall.SIGTERM)
		wg.Go(func() {
			if _, exited := fa.Wait(fleetStopWait); !exited {
				fa.Kill()
			}
		})
	}
	logf("SIGTERM to the %d agents still running", n)
	wg.Wait()
}

// sampleRSS keeps each agent's highest VmHWM and RssAnon, read every 2 s.
func (r *fleetRun) sampleRSS(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		for _, fa := range r.agents {
			if fa.Agent == nil || !fa.Alive() {
				continue
			}
			if hwm, anon := memKB(fa.Pid()); hwm > 0 {
				fa.mu.Lock()
				fa.hwmKB, fa.anonKB = max(fa.hwmKB, hwm), max(fa.anonKB, anon)
				fa.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// memKB reads the peak resident set size of pid (VmHWM) and its resident
// anonymous memory (RssAnon) in KiB; 0 when it is gone. VmHWM counts the
// pages of the binary, which every agent shares.
func memKB(pid int) (hwm, anon int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, _ := strings.Cut(line, ":")
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch name {
		case "VmHWM":
			hwm = n
		case "RssAnon":
			anon = n
		}
	}
	return hwm, anon
}

// generate sends o.rate tasks a second until ctx ends: 70 % quick with
// long-tailed run times, 10 % each of the others on Zipf-skewed hosts (a
// few hot hosts meet the quota, the interval and the window).
func (r *fleetRun) generate(ctx context.Context, l *harness.Lab, queueURL string) error {
	rng := rand.New(rand.NewPCG(r.o.seed, 0x7a5c))
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(r.o.hosts-1))
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	hotShare := min(0.1, 1.2/(0.7*r.o.rate))
	owed := 0.0
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			owed += r.o.rate * now.Sub(last).Seconds()
			last = now
		}
		n := int(owed)
		owed -= float64(n)
		bodies := make([]string, 0, n)
		for range n {
			st := sentTask{id: fmt.Sprintf("t-%06d", len(r.sent))}
			switch x := rng.Float64(); {
			case x < 0.7:
				// Spread over every host, and about 1.2 a second on one hot
				// host: near its cap, below what the cap lets through.
				st.diag, st.secs, st.host = "quick", longTail(rng), r.o.hostName(rng.IntN(r.o.hosts))
				if r.o.runsOn != runsOnDefault {
					// Every agent's machine.
					st.host = r.o.hostName(rng.IntN(r.o.agents))
				}
				if rng.Float64() < hotShare && !r.o.even {
					st.host = r.o.hostName(0)
				}
			default:
				st.diag, st.secs = fleetDiagnostics[1+int((x-0.7)/0.1)%3], 0.05+0.25*rng.Float64()
				st.host = r.o.hostName(int(zipf.Uint64()))
				if r.o.even {
					st.host = r.o.hostName(rng.IntN(r.o.hosts))
					if r.o.runsOn != runsOnDefault {
						st.host = r.o.hostName(rng.IntN(r.o.agents))
					}
				}
			}
			st.at = time.Now()
			r.sent = append(r.sent, st)
			bodies = append(bodies, fmt.Sprintf(`{"id":%q,"host":%q,"diagnostic":%q,"params":{"secs":"%.3f"}}`, st.id, st.host, st.diag, st.secs))
		}
		if len(bodies) == 0 {
			continue
		}
		r.sendOps += (len(bodies) + 9) / 10
		// The batch is already counted as sent: it goes out even when ctx
		// ends meanwhile, or the checker would count its tasks lost.
		sendCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		ids, err := l.SQS.Send(sendCtx, queueURL, bodies...)
		cancel()
		if err != nil {
			return err
		}
		for i, id := range ids {
			if i < len(bodies) {
				r.msgTask[id] = r.sent[len(r.sent)-len(bodies)+i].id
			}
		}
	}
}

// hostName is the workload's i-th host: host-NN, or in the -runs-on modes
// agent i's machine.
func (o fleetOpts) hostName(i int) string {
	if o.runsOn == runsOnDefault {
		return fmt.Sprintf("host-%02d", i)
	}
	return nodeName(i % o.agents)
}

// longTail draws a run time: most under 1 s, a few up to fleetMaxRun.
func longTail(rng *rand.Rand) float64 {
	switch x := rng.Float64(); {
	case x < 0.80:
		return 0.05 + 0.45*rng.Float64()
	case x < 0.95:
		return 0.5 + 1.5*rng.Float64()
	case x < 0.99:
		return 2 + 6*rng.Float64()
	default:
		return 8 + (fleetMaxRun.Seconds()-8)*rng.Float64()
	}
}

// markScript writes one S line before the run and one E line after it to
// marks: kind, task id, host, diagnostic, instance, time. Each line is one
// append under PIPE_BUF, so lines of concurrent runs never interleave;
// bash's EPOCHREALTIME spares a fork per mark.
func markScript(marks string) string {
	return fmt.Sprintf(`#!/bin/bash
# mark.sh ID HOST SECS INSTANCE DIAGNOSTIC
printf 'S %%s %%s %%s %%s %%s\n' "$1" "$2" "$5" "$4" "$EPOCHREALTIME" >> '%[1]s'
/bin/sleep "$3"
printf 'E %%s %%s %%s %%s %%s\n' "$1" "$2" "$5" "$4" "$EPOCHREALTIME" >> '%[1]s'
`, marks)
}

// fleetCatalog is the agent's diagnostics: each runs the mark script with
// the task's run time; the instance id is written in since the catalog has
// no placeholder for it, so each mark says which agent ran it. With
// -runs-on target each is host-local (runs_on target): the mark's instance
// must be the one whose host the task names.
func fleetCatalog(script, inst, runsOn string) string {
	var b strings.Builder
	for _, d := range fleetDiagnostics {
		fmt.Fprintf(&b, "  - name: %s\n    command: [/bin/bash, '%s', '{id}', '{host}', '{param.secs}', '%s', %s]\n    params: {secs: '[0-9]{1,2}\\.[0-9]{3}'}\n    timeout: 60s\n",
			d, script, inst, d)
		if runsOn == runsOnTarget {
			b.WriteString("    runs_on: target\n")
		}
	}
	return b.String()
}
