package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/harness"
)

// markTolerance is how much earlier than its limiter decision a run's S mark
// may appear to be, relative to another run's: the decision, the claim and
// the exec of bash lie between them, on a loaded machine. The min-interval
// and window checks allow it; the quota and cap checks need none.
const markTolerance = 500 * time.Millisecond

// redisUsage is the part of INFO the costs are computed from.
type redisUsage struct {
	commands int64   // every command but INFO (which the simulation sends)
	cpu      float64 // used_cpu_sys + used_cpu_user, seconds
}

// markRun is one execution seen in the marks.
type markRun struct {
	id, host, diag, inst string
	start, end           time.Time // end zero: no E mark
}

func readMarks(path string) ([]markRun, error) {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("marks: %w", err)
	}
	open := map[string][]int{} // id+inst → indexes of runs without an end
	var runs []markRun
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 {
			continue
		}
		ts, err := strconv.ParseFloat(f[5], 64)
		if err != nil {
			continue
		}
		at := time.Unix(0, int64(ts*1e9))
		key := f[1] + " " + f[4]
		switch f[0] {
		case "S":
			open[key] = append(open[key], len(runs))
			runs = append(runs, markRun{id: f[1], host: f[2], diag: f[3], inst: f[4], start: at})
		case "E":
			if q := open[key]; len(q) > 0 {
				runs[q[0]].end = at
				open[key] = q[1:]
			}
		}
	}
	return runs, nil
}

// fleetResult is what docs/results/fleetsim.json holds.
type fleetResult struct {
	Date     string         `json:"date"`
	Params   fleetParam     `json:"params"`
	Health   []healthSample `json:"health"` // every healthEvery from the agents' start
	Tasks    taskCounts     `json:"tasks"`
	Limiter  limiterRes     `json:"limiter"`
	Drain    drainRes       `json:"drain"`
	Costs    costs          `json:"costs"`
	Agents   agentsRes      `json:"agents"`
	Checks   []check        `json:"checks"`
	Pass     bool           `json:"pass"`
	Timeline timeline       `json:"timeline"`
	Redis    *redisRes      `json:"redis,omitempty"`
	Notices  *noticeRes     `json:"notices,omitempty"`
	Target   *targetRes     `json:"target,omitempty"` // -runs-on any or target
	Warnings []logCount     `json:"agent_warnings"`   // the agents' warnings and errors, by message
}

type fleetParam struct {
	Agents          int     `json:"agents"`
	DurationSeconds float64 `json:"duration_seconds"`
	Rate            float64 `json:"rate_per_second"`
	Hosts           int     `json:"hosts"`
	Workers         int     `json:"workers_per_agent"`
	ScaledIn        int     `json:"scaled_in"`
	Killed          int     `json:"killed"`
	Frozen          int     `json:"frozen"`
	FreezeSeconds   float64 `json:"freeze_seconds"`
	VisibilitySecs  float64 `json:"visibility_timeout_seconds"`
	GoMemLimit      string  `json:"gomemlimit"`
	Seed            uint64  `json:"seed"`
	RunsOn          string  `json:"runs_on,omitempty"`
	Even            bool    `json:"even,omitempty"`
}

type taskCounts struct {
	Sent    int `json:"sent"`
	RunOnce int `json:"run_once"`
	// RunTwice counts tasks run more than once; RerunAfterFault those whose
	// every earlier run was on an agent killed or frozen during that run
	// (the lease lapsed: at-least-once by design), Unexplained the rest.
	RunTwice        int            `json:"run_twice"`
	RerunAfterFault int            `json:"rerun_after_fault"`
	Unexplained     int            `json:"run_twice_unexplained"`
	NotRun          map[string]int `json:"not_run_by_outcome"`
	Pending         int            `json:"left_on_queue"`
	Lost            int            `json:"lost"`
	Outcomes        map[string]int `json:"outcomes"`
	// Busiest is how the ended tasks spread over the agents: an agent's
	// own keys (its in-flight hash) are only as hot as its share.
	Busiest busiest `json:"busiest_agent"`
	// Reruns lists each task run more than once: its runs, instance (role)
	// and start → end in seconds since the first task, and for an
	// unexplained one the agents' log lines about it.
	Reruns map[string][]string `json:"reruns,omitempty"`
}

// busyWindow is the span over which the busiest agent's share of the
// ended tasks is taken: the MONITOR window's default length, since an
// agent's own keys take commands in proportion to its tasks.
const busyWindow = 10 * time.Second

// busyMin is the fewest ended tasks a window needs to count (the windows
// before the first tasks and after the last are left out).
const busyMin = 100

// busiest is how the ended tasks spread over the agents, window by window:
// the busiest agent's share of each busyWindow's tasks, median and max
// over the windows with busyMin tasks or more.
type busiest struct {
	WindowSeconds float64 `json:"window_seconds"`
	Windows       int     `json:"windows"`
	MedianShare   float64 `json:"median_share"`
	MaxShare      float64 `json:"max_share"`
}

// busiestOf computes busiest from each agent's task end times.
func busiestOf(ends [][]time.Time, t0 time.Time) busiest {
	per := map[int]map[int]int{} // window → agent → tasks
	total := map[int]int{}
	for a, ts := range ends {
		for _, at := range ts {
			w := int(at.Sub(t0) / busyWindow)
			if per[w] == nil {
				per[w] = map[int]int{}
			}
			per[w][a]++
			total[w]++
		}
	}
	var shares []float64
	for w, n := range total {
		if n < busyMin {
			continue
		}
		most := 0
		for _, c := range per[w] {
			most = max(most, c)
		}
		shares = append(shares, float64(most)/float64(n))
	}
	b := busiest{WindowSeconds: busyWindow.Seconds(), Windows: len(shares)}
	if len(shares) > 0 {
		b.MedianShare = quantile(shares, 0.5)
		b.MaxShare = slices.Max(shares)
	}
	return b
}

type limiterRes struct {
	CapPerHost        int     `json:"concurrency_cap"`
	MaxConcurrent     int     `json:"max_concurrent_seen"`
	Quota             int     `json:"daily_quota"`
	MaxQuotaUsed      int     `json:"max_daily_runs_seen"`
	MinIntervalSecs   float64 `json:"min_interval_seconds"`
	MinGapSecs        float64 `json:"min_gap_seen_seconds"`
	WindowCount       int     `json:"window_count"`
	WindowSecs        float64 `json:"window_seconds"`
	MaxInWindow       int     `json:"max_in_window_seen"`
	ToleranceSecs     float64 `json:"mark_tolerance_seconds"`
	Violations        int     `json:"violations"`
	RateLimitedByRule int     `json:"rate_limited"`
	// The runs behind the closest min-interval gap and the fullest
	// window: "task instance (role) start → end", seconds from the first
	// task sent.
	MinGapRuns []string `json:"min_gap_runs,omitempty"`
	WindowRuns []string `json:"max_window_runs,omitempty"`
}

type drainRes struct {
	Count              int       `json:"count"`
	P50                float64   `json:"p50_seconds"`
	P99                float64   `json:"p99_seconds"`
	Max                float64   `json:"max_seconds"`
	LongestInFlight    float64   `json:"longest_in_flight_at_trigger_seconds"`
	OverheadP99        float64   `json:"overhead_p99_seconds"`
	NoticeP50          float64   `json:"notice_delay_p50_seconds"`
	NoticeP99          float64   `json:"notice_delay_p99_seconds"`
	NoticeMax          float64   `json:"notice_delay_max_seconds"`
	Completed          int       `json:"actions_completed_once"`
	Expired            int       `json:"actions_expired"`
	CompletionAttempts int       `json:"completion_calls"`
	Heartbeats         int       `json:"heartbeat_calls"`
	DurationsSeconds   []float64 `json:"durations_seconds"`
	// Agents pairs each drain with what that agent had running at its
	// trigger (the longest remaining run) and its notice delay.
	Agents              []drainAgent `json:"agents"`
	NonZeroExitScaledIn int          `json:"scaled_in_nonzero_exits"`
	// NotTakenOn counts the runs that began on a draining agent after its
	// trigger beyond the work its drain took on (must be 0: intake stops
	// at the trigger). LongestInFlight counts the taken-on ones.
	NotTakenOn int `json:"runs_begun_after_trigger_not_taken_on"`
}

type costs struct {
	SQSCallsPerTask float64        `json:"sqs_calls_per_task"`
	SQSCalls        map[string]int `json:"sqs_calls_by_op"`
	SQSCallsByQueue map[string]int `json:"sqs_calls_by_queue"`
	// SQSEmptyPolls are the long polls that returned nothing (both
	// queues), and SQSCallsPerTaskBusy the calls per task without them:
	// idle agents poll as long as the run lasts, which a run whose last
	// tasks wait queue.target_wait for a killed host's agent prolongs.
	SQSEmptyPolls       int     `json:"sqs_empty_polls"`
	SQSCallsPerTaskBusy float64 `json:"sqs_calls_per_task_without_empty_polls"`
	// RunSeconds is from the first task sent to the queue's emptying (or
	// the settle's end), the span the SQS calls are counted over.
	RunSeconds float64 `json:"run_seconds"`
	// TaskQueue breaks the calls on the task queue down by kind.
	TaskQueue              sqsKinds `json:"sqs_task_queue"`
	RedisCommandsPerTask   float64  `json:"redis_commands_per_task"`
	RedisCPUPer1000        float64  `json:"redis_cpu_seconds_per_1000_tasks"`
	RedisCommands          int64    `json:"redis_commands"`
	RedisCPUSeconds        float64  `json:"redis_cpu_seconds"`
	WorkloadSeconds        float64  `json:"workload_seconds"`
	TasksPerSecondAchieved float64  `json:"tasks_per_second_ended"`
}

type agentsRes struct {
	PeakRSSMaxMiB  float64 `json:"peak_rss_max_mib"`
	PeakRSSP50MiB  float64 `json:"peak_rss_p50_mib"`
	PeakRSSMeanMiB float64 `json:"peak_rss_mean_mib"`
	PeakAnonMaxMiB float64 `json:"peak_rss_anon_max_mib"`
	PeakAnonP50MiB float64 `json:"peak_rss_anon_p50_mib"`
	BadExits       int     `json:"unexpected_exits"`
}

type drainAgent struct {
	Instance        string  `json:"instance"`
	DrainSeconds    float64 `json:"drain_seconds"`
	LongestInFlight float64 `json:"longest_in_flight_seconds"`
	NoticeSeconds   float64 `json:"notice_delay_seconds"`
	// WorkEndedSeconds is from the trigger to its "drain work ended" line
	// (intake stopped, work ended or released): the rest of the drain is
	// the lifecycle completion. Released is that line's count.
	WorkEndedSeconds float64 `json:"work_ended_seconds"`
	Released         int     `json:"released"`
	// StartedAfterSeconds is when the last run that started after the
	// trigger ended, from the trigger (0: none did).
	StartedAfterSeconds float64 `json:"runs_started_after_trigger_end_seconds"`
	// TookOn is the work the drain took on at its start (its "drain
	// started" line's running + queued; -1: not said). A task is running
	// to the drain from when it has a worker, before its lease and limiter
	// decision, so its diagnostic may begin after the trigger:
	// TakenOnRunAfter such runs count in LongestInFlight. Runs that began
	// after the trigger beyond what the drain took on are NotTakenOn:
	// work taken after the intake stopped.
	TookOn          int `json:"took_on_at_trigger"`
	TakenOnRunAfter int `json:"taken_on_runs_begun_after_trigger"`
	NotTakenOn      int `json:"runs_begun_after_trigger_not_taken_on"`
}

// drainBound is what one drain had to finish, from its agent's marks.
type drainBound struct {
	// longest is the longest remaining run, from the trigger, of the
	// diagnostics running at it and of those the drain had taken on that
	// began after it.
	longest float64
	// lateEnd is when the last run that began after the trigger ended.
	lateEnd     float64
	takenOnLate int
	notTakenOn  int
}

// drainBoundOf measures inst's drain from the trigger at against its
// runs: tookOn (the drain's running + queued at its start, -1 unknown) is
// the most runs that may be in flight at the trigger or begin after it; the
// earliest-begun late runs within it are the drain's own work, any beyond
// it are counted as not taken on. Running counts tasks being recorded
// too, so the bound is an upper one.
func drainBoundOf(runs []markRun, inst string, at time.Time, tookOn int) drainBound {
	var b drainBound
	inFlight := 0
	var late []markRun
	for _, rn := range runs {
		switch {
		case rn.inst != inst:
		case !rn.start.After(at) && rn.end.After(at):
			inFlight++
			b.longest = max(b.longest, rn.end.Sub(at).Seconds())
		case rn.start.After(at):
			late = append(late, rn)
			b.lateEnd = max(b.lateEnd, rn.end.Sub(at).Seconds())
		}
	}
	slices.SortFunc(late, func(x, y markRun) int { return x.start.Compare(y.start) })
	own := max(0, tookOn-inFlight)
	for i, rn := range late {
		if i < own {
			b.takenOnLate++
			b.longest = max(b.longest, rn.end.Sub(at).Seconds())
			continue
		}
		b.notTakenOn++
	}
	return b
}

// tookOnAt is a "drain started" line's running + queued, -1 when the
// line does not say.
func tookOnAt(line map[string]any) int {
	running, ok1 := line["running"].(float64)
	queued, ok2 := line["queued"].(float64)
	if !ok1 || !ok2 {
		return -1
	}
	return int(running + queued)
}

type check struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Pass bool   `json:"pass"`
}

// timeline is per second since the first task: tasks sent and tasks ended
// by outcome, and when the faults came.
type timeline struct {
	Sent           []int            `json:"sent"`
	Ended          map[string][]int `json:"ended_by_outcome"`
	FreezeSecond   float64          `json:"freeze_at"`
	ResumeSecond   float64          `json:"resume_at"`
	ScaleInSecond  float64          `json:"scale_in_at"`
	KillSecond     float64          `json:"kill_at"`
	SendStopSecond float64          `json:"send_stop_at"`
}

// finalOutcomes end a task without running it; "released" and deferrals
// hand it back, so they are not final.
var finalOutcomes = map[string]bool{"rate_limited": true, "rejected": true, "stale": true, "duplicate": true}

// params are the run's parameters, as the results give them.
func (r *fleetRun) params() fleetParam {
	o := r.o
	return fleetParam{Agents: o.agents, DurationSeconds: o.duration.Seconds(), Rate: o.rate, Hosts: o.hosts, Workers: o.workers,
		ScaledIn: len(r.role("scaled_in")), Killed: len(r.role("killed")), Frozen: len(r.role("frozen")),
		FreezeSeconds: o.freeze.Seconds(), VisibilitySecs: fleetVisibility.Seconds(), GoMemLimit: o.memLimit, Seed: o.seed,
		RunsOn: o.runsOn, Even: o.even}
}

func (r *fleetRun) check() *fleetResult {
	res := &fleetResult{Date: time.Now().UTC().Format(time.RFC3339)}
	res.Params = r.params()
	res.Health = r.health.all()
	add := func(name, want, got string, pass bool) {
		res.Checks = append(res.Checks, check{Name: name, Want: want, Got: got, Pass: pass})
	}

	runs, err := readMarks(r.marks)
	if err != nil {
		add("marks readable", "yes", err.Error(), false)
	}
	byInst := map[string]*fleetAgent{}
	for _, fa := range r.agents {
		byInst[fa.inst] = fa
	}
	// A run without an E mark ended when its instance was killed; one on
	// a surviving instance never ended (counted as running to the end).
	for i := range runs {
		if !runs[i].end.IsZero() {
			continue
		}
		if fa := byInst[runs[i].inst]; fa != nil && fa.role == "killed" {
			runs[i].end = fa.killed
		} else {
			runs[i].end = time.Now()
		}
	}
	faulted := func(rn markRun) bool {
		fa := byInst[rn.inst]
		if fa == nil {
			return false
		}
		switch fa.role {
		case "killed":
			// Each agent's own kill time: the kills take a moment each.
			return rn.start.Before(fa.killed)
		case "frozen":
			return rn.start.Before(r.contAt) && rn.end.After(r.freezeAt.Add(-fleetVisibility))
		}
		return false
	}

	// Exactly once.
	runsOf := map[string][]markRun{}
	for _, rn := range runs {
		runsOf[rn.id] = append(runsOf[rn.id], rn)
	}
	outcomes := map[string]int{}
	finalOf := map[string]string{}
	ended := map[string][]int{}
	bucket := func(t time.Time) int { return max(0, int(t.Sub(r.t0)/time.Second)) }
	var ends [][]time.Time
	var lines []endedLine
	for _, fa := range r.agents {
		if fa.Agent == nil {
			continue
		}
		var own []time.Time
		for _, line := range fa.Logs("task ended") {
			oc, _ := line["outcome"].(string)
			id, _ := line["task_id"].(string)
			reason, _ := line["reason"].(string)
			handoff, _ := line["handoff_seconds"].(float64)
			lines = append(lines, endedLine{id: id, outcome: oc, reason: reason, handoff: handoff, role: fa.role})
			outcomes[oc]++
			if finalOutcomes[oc] && finalOf[id] == "" {
				finalOf[id] = oc
			}
			at, _ := harness.LogTime(line)
			own = append(own, at)
			b := bucket(at)
			s := ended[oc]
			for len(s) <= b {
				s = append(s, 0)
			}
			s[b]++
			ended[oc] = s
		}
		ends = append(ends, own)
	}
	tc := taskCounts{Sent: len(r.sent), NotRun: map[string]int{}, Pending: r.pending, Outcomes: outcomes, Busiest: busiestOf(ends, r.t0)}
	unaccounted := 0
	for _, st := range r.sent {
		rs := runsOf[st.id]
		switch {
		case len(rs) == 1:
			tc.RunOnce++
		case len(rs) > 1:
			tc.RunTwice++
			slices.SortFunc(rs, func(a, b markRun) int { return a.start.Compare(b.start) })
			explained := true
			for _, rn := range rs[:len(rs)-1] {
				explained = explained && faulted(rn)
			}
			if tc.Reruns == nil {
				tc.Reruns = map[string][]string{}
			}
			for _, rn := range rs {
				role := "stays"
				if fa := byInst[rn.inst]; fa != nil && fa.role != "" {
					role = fa.role
				}
				tc.Reruns[st.id] = append(tc.Reruns[st.id], fmt.Sprintf("%s (%s) %.3f → %.3f",
					rn.inst, role, rn.start.Sub(r.t0).Seconds(), rn.end.Sub(r.t0).Seconds()))
			}
			if explained {
				tc.RerunAfterFault++
				break
			}
			tc.Unexplained++
			for _, fa := range r.agents {
				if fa.Agent == nil {
					continue
				}
				for _, line := range fa.Logs("") {
					if line["task_id"] == st.id {
						at, _ := harness.LogTime(line)
						tc.Reruns[st.id] = append(tc.Reruns[st.id], fmt.Sprintf("log %s %.3f: %v %v %v",
							fa.inst, at.Sub(r.t0).Seconds(), line["msg"], line["outcome"], line["reason"]))
					}
				}
			}
		case finalOf[st.id] != "":
			tc.NotRun[finalOf[st.id]]++
		default:
			unaccounted++
		}
	}
	tc.Lost = max(0, unaccounted-r.pending)
	res.Tasks = tc
	add("lost", "0", strconv.Itoa(tc.Lost), tc.Lost == 0)
	add("run twice, not explained by a kill or the freeze", "0", strconv.Itoa(tc.Unexplained), tc.Unexplained == 0)
	add("left on the queue after the settle", "0", strconv.Itoa(tc.Pending), tc.Pending == 0)

	res.Limiter = r.checkLimits(runs)
	res.Limiter.RateLimitedByRule = outcomes["rate_limited"]
	add("limits held fleet-wide (cap, daily, min interval, window)", "0 violations",
		fmt.Sprintf("%d (max %d at once / cap %d; max %d a day / %d; min gap %.2f s / %s; max %d per %s / %d)",
			res.Limiter.Violations, res.Limiter.MaxConcurrent, fleetCap, res.Limiter.MaxQuotaUsed, fleetQuota,
			res.Limiter.MinGapSecs, fleetMinInterval, res.Limiter.MaxInWindow, fleetWindow, fleetWindowCount),
		res.Limiter.Violations == 0)

	res.Drain = r.checkDrains(runs)
	d := res.Drain
	add("drain p99 ≤ longest task taken on before the trigger + 1 s", fmt.Sprintf("≤ %.2f s", d.LongestInFlight+1),
		fmt.Sprintf("p99 %.2f s", d.P99), d.Count > 0 && d.P99 <= d.LongestInFlight+1)
	add("runs begun after a drain's trigger beyond the work it took on", "0", strconv.Itoa(d.NotTakenOn), d.NotTakenOn == 0)
	add("lifecycle actions completed exactly once, none expired", fmt.Sprintf("%d completed once, 0 expired", res.Params.ScaledIn),
		fmt.Sprintf("%d completed once, %d expired", d.Completed, d.Expired), d.Completed == res.Params.ScaledIn && d.Expired == 0)
	add("scaled-in agents exit 0", "0 other exits", strconv.Itoa(d.NonZeroExitScaledIn), d.NonZeroExitScaledIn == 0)

	if r.o.runsOn != runsOnDefault {
		tr := checkTarget(r, runs, lines)
		res.Target = &tr
		if r.o.runsOn == runsOnTarget {
			add("runs on a machine other than the task's target", "0", strconv.Itoa(tr.WrongMachine), tr.WrongMachine == 0)
			add("hand-off delay p99 (receipt by another agent → start on the host's agent; the frozen agent's left out)", "≤ 1 s",
				fmt.Sprintf("p99 %.3f s (p50 %.3f s, max %.3f s, %d handed)", tr.HandoffP99, tr.HandoffP50, tr.HandoffMax, tr.Handed),
				tr.Handed > 0 && tr.HandoffP99 <= 1)
			add("unrun tasks of scaled-in or killed hosts end rejected target_draining / no_agent_for_host (or rate_limited)", "0 other ends",
				fmt.Sprintf("%d (%s)", tr.DepartedBad, fmtMap(tr.Departed, "%d")), tr.DepartedBad == 0)
		}
	}

	res.Costs = r.costs(res.Params.ScaledIn)
	res.Costs.TaskQueue = countSQSKinds(lines, r.sqsTaskCalls, r.sqsAt.Sub(r.t0))
	res.Agents = r.agentStats()
	res.Redis = r.redis
	res.Notices = r.notices
	add("other agents exit 0 on SIGTERM (no crash)", "0 other exits", strconv.Itoa(res.Agents.BadExits), res.Agents.BadExits == 0)

	sent := make([]int, 0)
	for _, st := range r.sent {
		b := bucket(st.at)
		for len(sent) <= b {
			sent = append(sent, 0)
		}
		sent[b]++
	}
	rel := func(t time.Time) float64 { return t.Sub(r.t0).Seconds() }
	res.Timeline = timeline{Sent: sent, Ended: ended, FreezeSecond: rel(r.freezeAt), ResumeSecond: rel(r.contAt),
		ScaleInSecond: rel(r.scaleAt), KillSecond: rel(r.killAt), SendStopSecond: rel(r.sendStop)}
	res.Pass = true
	for _, c := range res.Checks {
		res.Pass = res.Pass && c.Pass
	}
	return res
}

// checkLimits replays the marks against the four rules, per host.
func (r *fleetRun) checkLimits(runs []markRun) limiterRes {
	lr := limiterRes{CapPerHost: fleetCap, Quota: fleetQuota, MinIntervalSecs: fleetMinInterval.Seconds(),
		WindowCount: fleetWindowCount, WindowSecs: fleetWindow.Seconds(), ToleranceSecs: markTolerance.Seconds(), MinGapSecs: math.Inf(1)}
	byHostDiag := map[string][]markRun{}
	for _, rn := range runs {
		k := rn.host + " " + rn.diag
		byHostDiag[k] = append(byHostDiag[k], rn)
	}
	for k, rs := range byHostDiag {
		slices.SortFunc(rs, func(a, b markRun) int { return a.start.Compare(b.start) })
		switch k[strings.IndexByte(k, ' ')+1:] {
		case "quick":
			type edge struct {
				at time.Time
				d  int
			}
			var es []edge
			for _, rn := range rs {
				es = append(es, edge{rn.start, 1}, edge{rn.end, -1})
			}
			// An end at the same instant as a start frees its slot first.
			sort.Slice(es, func(i, j int) bool {
				if es[i].at.Equal(es[j].at) {
					return es[i].d < es[j].d
				}
				return es[i].at.Before(es[j].at)
			})
			n := 0
			for _, e := range es {
				n += e.d
				lr.MaxConcurrent = max(lr.MaxConcurrent, n)
			}
		case "disk":
			ids := map[string]bool{}
			for _, rn := range rs {
				ids[rn.id] = true
			}
			lr.MaxQuotaUsed = max(lr.MaxQuotaUsed, len(ids))
		case "trace":
			for i := 1; i < len(rs); i++ {
				if gap := rs[i].start.Sub(rs[i-1].start).Seconds(); gap < lr.MinGapSecs {
					lr.MinGapSecs = gap
					lr.MinGapRuns = r.describeRuns(rs[i-1 : i+1])
				}
			}
		case "netstat":
			j := 0
			for i := range rs {
				for rs[i].start.Sub(rs[j].start) >= fleetWindow-markTolerance {
					j++
				}
				if i-j+1 > lr.MaxInWindow {
					lr.MaxInWindow = i - j + 1
					lr.WindowRuns = r.describeRuns(rs[j : i+1])
				}
			}
		}
	}
	if math.IsInf(lr.MinGapSecs, 1) {
		lr.MinGapSecs = 0
	} else if lr.MinGapSecs < (fleetMinInterval - markTolerance).Seconds() {
		lr.Violations++
	}
	if lr.MaxConcurrent > fleetCap {
		lr.Violations++
	}
	if lr.MaxQuotaUsed > fleetQuota {
		lr.Violations++
	}
	if lr.MaxInWindow > fleetWindowCount {
		lr.Violations++
	}
	return lr
}

// describeRuns names runs as the report lists them: task, instance and
// its role in the run, start and end in seconds from the first task sent.
func (r *fleetRun) describeRuns(rs []markRun) []string {
	role := map[string]string{}
	for _, fa := range r.agents {
		role[fa.inst] = fa.role
	}
	out := make([]string, 0, len(rs))
	for _, rn := range rs {
		ro := role[rn.inst]
		if ro == "" {
			ro = "stays"
		}
		out = append(out, fmt.Sprintf("%s %s (%s) %.3f → %.3f", rn.id, rn.inst, ro,
			rn.start.Sub(r.t0).Seconds(), rn.end.Sub(r.t0).Seconds()))
	}
	return out
}

// checkDrains measures each scaled-in agent's drain: from its trigger (the
// notice read off the lifecycle queue) to the successful completion of its
// action, against the work it took on at the trigger (drainBoundOf).
func (r *fleetRun) checkDrains(runs []markRun) drainRes {
	var dr drainRes
	var durs, notices, overheads []float64
	for _, fa := range r.role("scaled_in") {
		act, ok := r.asg.Action(fa.inst)
		switch {
		case !ok:
		case act.EndReason == asgfake.EndCompleted && act.Completions == 1:
			dr.Completed++
		case act.EndReason == asgfake.EndHeartbeatTimeout || act.EndReason == asgfake.EndGlobalTimeout:
			dr.Expired++
		}
		fa.mu.Lock()
		if !fa.exitAt.IsZero() && fa.code != 0 || fa.exitAt.IsZero() {
			dr.NonZeroExitScaledIn++
		}
		fa.mu.Unlock()
		if fa.Agent == nil {
			continue
		}
		trig := fa.Logs("lifecycle trigger")
		if len(trig) == 0 || !ok || act.EndReason != asgfake.EndCompleted {
			continue
		}
		at, _ := harness.LogTime(trig[0])
		tookOn := -1 // unknown: an agent whose line predates the counts
		if started := fa.Logs("drain started"); len(started) > 0 {
			tookOn = tookOnAt(started[0])
		}
		b := drainBoundOf(runs, fa.inst, at, tookOn)
		longest, late := b.longest, b.lateEnd
		dr.NotTakenOn += b.notTakenOn
		d := act.EndedAt.Sub(at).Seconds()
		durs = append(durs, d)
		// From its own Terminate, when its notice was sent: not from the
		// scale-in's start, which would count the sends before it.
		fa.mu.Lock()
		from := fa.terminated
		fa.mu.Unlock()
		if from.IsZero() {
			from = r.scaleAt
		}
		notice := at.Sub(from).Seconds()
		da := drainAgent{Instance: fa.inst, DrainSeconds: d, LongestInFlight: longest, NoticeSeconds: notice, StartedAfterSeconds: late,
			TookOn: tookOn, TakenOnRunAfter: b.takenOnLate, NotTakenOn: b.notTakenOn}
		if ended := fa.Logs("drain work ended"); len(ended) > 0 {
			if t, err := harness.LogTime(ended[0]); err == nil {
				da.WorkEndedSeconds = t.Sub(at).Seconds()
			}
			if n, ok := ended[0]["released"].(float64); ok {
				da.Released = int(n)
			}
		}
		dr.Agents = append(dr.Agents, da)
		notices = append(notices, notice)
		overheads = append(overheads, d-longest)
		dr.LongestInFlight = max(dr.LongestInFlight, longest)
	}
	for _, c := range r.asg.Calls() {
		switch c.Op {
		case "CompleteLifecycleAction":
			dr.CompletionAttempts++
		case "RecordLifecycleActionHeartbeat":
			dr.Heartbeats++
		}
	}
	dumpSlowestDrain(dr.Agents, r.agents, r.o.out)
	dr.Count = len(durs)
	dr.P50, dr.P99, dr.Max = quantile(durs, 0.5), quantile(durs, 0.99), quantile(durs, 1)
	dr.OverheadP99 = quantile(overheads, 0.99)
	dr.NoticeP50, dr.NoticeP99, dr.NoticeMax = quantile(notices, 0.5), quantile(notices, 0.99), quantile(notices, 1)
	slices.Sort(durs)
	dr.DurationsSeconds = durs
	return dr
}

// quantile is the nearest-rank q-quantile (0 for no data).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func (r *fleetRun) costs(notices int) costs {
	c := costs{SQSCalls: map[string]int{}, SQSCallsByQueue: r.sqsByQueue, WorkloadSeconds: r.sendStop.Sub(r.t0).Seconds()}
	total := 0
	for op, n := range r.sqsAfter {
		d := n - r.sqsBefore[op]
		// The generator's sends and the lifecycle notices are not the fleet's.
		switch op {
		case "SendMessageBatch":
			d -= r.sendOps
		case "SendMessage":
			d -= notices
		}
		if d > 0 {
			c.SQSCalls[op] = d
			total += d
		}
	}
	n := float64(max(1, len(r.sent)))
	c.SQSCallsPerTask = float64(total) / n
	c.SQSEmptyPolls = r.sqsEmptyPolls
	c.RunSeconds = r.sqsAt.Sub(r.t0).Seconds()
	c.SQSCallsPerTaskBusy = float64(max(0, total-r.sqsEmptyPolls)) / n
	c.RedisCommands = r.redisAfter.commands - r.redisBefore.commands
	c.RedisCPUSeconds = r.redisAfter.cpu - r.redisBefore.cpu
	c.RedisCommandsPerTask = float64(c.RedisCommands) / n
	c.RedisCPUPer1000 = c.RedisCPUSeconds / n * 1000
	c.TasksPerSecondAchieved = n / c.WorkloadSeconds
	return c
}

func (r *fleetRun) agentStats() agentsRes {
	var ar agentsRes
	var mibs, anon []float64
	sum := 0.0
	for _, fa := range r.agents {
		fa.mu.Lock()
		if fa.hwmKB > 0 {
			m := float64(fa.hwmKB) / 1024
			mibs = append(mibs, m)
			anon = append(anon, float64(fa.anonKB)/1024)
			sum += m
		}
		if fa.role != "killed" && fa.role != "scaled_in" && (fa.exitAt.IsZero() || fa.code != 0) {
			ar.BadExits++
		}
		fa.mu.Unlock()
	}
	ar.PeakRSSMaxMiB = quantile(mibs, 1)
	ar.PeakRSSP50MiB = quantile(mibs, 0.5)
	ar.PeakAnonMaxMiB, ar.PeakAnonP50MiB = quantile(anon, 1), quantile(anon, 0.5)
	if len(mibs) > 0 {
		ar.PeakRSSMeanMiB = sum / float64(len(mibs))
	}
	return ar
}

func (res *fleetResult) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results dir: %w", err)
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fleetsim.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return res.plot(dir)
}

// print writes the results as the Markdown table of docs/RESULTS.md.
func (res *fleetResult) print(w io.Writer) {
	t, d, c, a := res.Tasks, res.Drain, res.Costs, res.Agents
	fmt.Fprintln(w, "| measure | value |")
	fmt.Fprintln(w, "|---|---|")
	rows := [][2]string{
		{"agents / scaled in / killed / frozen", fmt.Sprintf("%d / %d / %d / %d", res.Params.Agents, res.Params.ScaledIn, res.Params.Killed, res.Params.Frozen)},
		{"tasks sent", strconv.Itoa(t.Sent)},
		{"run once", strconv.Itoa(t.RunOnce)},
		{"run twice (after a kill or the freeze / other)", fmt.Sprintf("%d (%d / %d)", t.RunTwice, t.RerunAfterFault, t.Unexplained)},
		{"not run (final outcome)", fmtMap(t.NotRun, "%d")},
		{"lost / left on the queue", fmt.Sprintf("%d / %d", t.Lost, t.Pending)},
		{"outcomes logged", fmtMap(t.Outcomes, "%d")},
		{fmt.Sprintf("busiest agent's share of %.0f s of ended tasks, median / max", t.Busiest.WindowSeconds), fmt.Sprintf("%.1f / %.1f %% (%d windows; an even share %.1f %%)", 100*t.Busiest.MedianShare, 100*t.Busiest.MaxShare, t.Busiest.Windows, 100/float64(max(1, res.Params.Agents)))},
		{"drain p50 / p99 / max", fmt.Sprintf("%.2f / %.2f / %.2f s (%d drains)", d.P50, d.P99, d.Max, d.Count)},
		{"longest task taken on before a trigger (running, or begun after it)", fmt.Sprintf("%.2f s (drain − own longest, p99: %.2f s)", d.LongestInFlight, d.OverheadP99)},
		{"notice delay (Terminate → agent trigger) p50 / p99 / max", fmt.Sprintf("%.2f / %.2f / %.2f s", d.NoticeP50, d.NoticeP99, d.NoticeMax)},
		{"lifecycle actions completed once / expired", fmt.Sprintf("%d / %d (%d completion calls, %d heartbeats)", d.Completed, d.Expired, d.CompletionAttempts, d.Heartbeats)},
		{"SQS calls per task", fmt.Sprintf("%.2f (%s; by queue: %s)", c.SQSCallsPerTask, fmtMap(c.SQSCalls, "%d"), fmtMap(c.SQSCallsByQueue, "%d"))},
		{"SQS calls per task without the empty long polls", fmt.Sprintf("%.2f (%d empty polls over %.0f s)", c.SQSCallsPerTaskBusy, c.SQSEmptyPolls, c.RunSeconds)},
		{"SQS calls on the task queue by kind", fmtMap(c.TaskQueue.ByKind, "%d")},
		{"released outcomes by reason", fmtMap(c.TaskQueue.Released, "%d")},
		{fmt.Sprintf("of which for the %d tasks that ended no_agent_for_host (a batch shared among its messages)", c.TaskQueue.NoAgentTasks), fmtMap(c.TaskQueue.NoAgent, "%.2f")},
		{"Redis commands per task", fmt.Sprintf("%.1f", c.RedisCommandsPerTask)},
		{"runs_on mode, even spread", fmt.Sprintf("%q, %v", res.Params.RunsOn, res.Params.Even)},
		{"Redis CPU per 1,000 tasks", fmt.Sprintf("%.3f s", c.RedisCPUPer1000)},
		{"peak RSS per agent (VmHWM) max / p50 / mean", fmt.Sprintf("%.1f / %.1f / %.1f MiB", a.PeakRSSMaxMiB, a.PeakRSSP50MiB, a.PeakRSSMeanMiB)},
		{"of which the agent's own (RssAnon, sampled every 2 s) max / p50", fmt.Sprintf("%.1f / %.1f MiB", a.PeakAnonMaxMiB, a.PeakAnonP50MiB)},
	}
	if tr := res.Target; tr != nil {
		rows = append(rows,
			[2]string{"runs on a machine other than the target", strconv.Itoa(tr.WrongMachine)},
			[2]string{"handed and run on the host's agent (to the frozen agent)", fmt.Sprintf("%d (%d)", tr.Handed, tr.FrozenHanded)},
			[2]string{"hand-offs (EXECs of GiveTask; a task comes back to another agent after a deferral or a lapsed visibility)", strconv.FormatInt(tr.HandOffs, 10)},
			[2]string{"hand-off delay p50 / p99 / max (to the frozen agent: max)", fmt.Sprintf("%.3f / %.3f / %.3f s (%.3f s)", tr.HandoffP50, tr.HandoffP99, tr.HandoffMax, tr.FrozenMax)},
			[2]string{"tasks of scaled-in or killed hosts", fmtMap(tr.Departed, "%d")},
			[2]string{"stream commands per handed task", fmtMap(tr.StreamPerHanded, "%.2f")})
	}
	for _, row := range rows {
		fmt.Fprintf(w, "| %s | %s |\n", row[0], row[1])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| must hold | want | measured | result |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, ch := range res.Checks {
		r := "PASS"
		if !ch.Pass {
			r = "FAIL"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", ch.Name, ch.Want, ch.Got, r)
	}
	if res.Limiter.Violations > 0 {
		fmt.Fprintf(w, "\nRuns behind the closest min-interval gap: %s.\n", strings.Join(res.Limiter.MinGapRuns, "; "))
		fmt.Fprintf(w, "Runs in the fullest window: %s.\n", strings.Join(res.Limiter.WindowRuns, "; "))
	}
	if res.Notices != nil {
		res.Notices.print(w)
	}
	if res.Redis != nil {
		res.Redis.print(w)
	}
}

// fmtMap is m as "key value, …" in key order, each value by verb (%d,
// %.2f); "none" when empty.
func fmtMap[V any](m map[string]V, verb string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s "+verb, k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
