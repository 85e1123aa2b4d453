package runner

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/autodiag/autodiag/internal/outcome"
)

// exists reports whether pid is still in the process table, a zombie
// included: a run must have killed and reaped what it left behind.
func exists(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// parentOf returns pid's parent, or 0 once pid is gone.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// zombieChildren lists the test process's dead, unreaped children.
func zombieChildren(t *testing.T) []int {
	t.Helper()
	names, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if f[0] == "Z" && f[1] == strconv.Itoa(os.Getpid()) {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			out = append(out, pid)
		}
	}
	return out
}

// killOnCleanup ends the process whose pid is in pidFile, if a run left
// it behind (on purpose, or by failing), and reaps it if it is the test
// process's child.
func killOnCleanup(t *testing.T, pidFile string) {
	t.Cleanup(func() {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil && parentOf(pid) == os.Getpid() {
			_, _ = unix.Wait4(pid, nil, 0, nil)
		}
	})
}

// assertReaped fails t if pid, a setsid'd descendant of a finished run, is
// still in the process table, or if the run left a child unreaped.
func assertReaped(t *testing.T, pid int) {
	t.Helper()
	if exists(pid) {
		t.Fatalf("setsid descendant %d survived its run", pid)
	}
	if z := zombieChildren(t); len(z) > 0 {
		t.Fatalf("unreaped children: %v", z)
	}
}

// runBounded runs argv and fails the test if Run has not returned within
// bound.
func runBounded(t *testing.T, ctx context.Context, r *Runner, d Diagnostic, argv []string, bound time.Duration) Result {
	t.Helper()
	done := make(chan Result, 1)
	go func() { done <- r.Run(ctx, d, argv) }()
	select {
	case res := <-done:
		return res
	case <-time.After(bound):
		t.Fatalf("Run still going %.1fs after it started (bound: timeout + KillGrace + reapTimeout)", bound.Seconds())
		return Result{}
	}
}

// detach returns a shell command that starts a setsid'd sleep (through
// prefix, with redirect) and returns once it has left the run's process
// group, so the group kill at the leader's exit cannot end it first.
func detach(prefix, pidFile, redirect string) string {
	return prefix + ` /usr/bin/setsid /bin/sh -c 'echo $$ > ` + pidFile + `; exec sleep 300' ` + redirect +
		` & while [ ! -s ` + pidFile + ` ]; do sleep 0.01; done`
}

func TestDetachedDescendantHoldingOutputTimesOut(t *testing.T) {
	withSetupTimeout(t, func(t *testing.T, timeout time.Duration) bool {
		pidFile := filepath.Join(t.TempDir(), "pid")
		killOnCleanup(t, pidFile)
		r := &Runner{KillGrace: 100 * time.Millisecond}
		d := Diagnostic{Timeout: timeout}
		// The setsid'd sleep leaves the process group and keeps the output pipe.
		script := detach("", pidFile, "") + `; exec sleep 300`
		bound := d.Timeout + r.KillGrace + reapTimeout
		res := runBounded(t, context.Background(), r, d, []string{"/bin/sh", "-c", script}, bound)
		if res.Outcome != outcome.TimedOut || res.Duration > bound {
			t.Fatalf("outcome = %s after %.2fs, want %s within %.2fs", res.Outcome, res.Duration.Seconds(), outcome.TimedOut, bound.Seconds())
		}
		// Run returns once every process of the run is gone: a pid not
		// written by now never will be, and then the timeout came before
		// the scene was set.
		pid, ok := pidWritten(pidFile)
		if ok {
			assertReaped(t, pid)
		}
		return ok
	})
}

func TestDetachedDescendantWithoutOutputDoesNotSurvive(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	killOnCleanup(t, pidFile)
	r := &Runner{KillGrace: 100 * time.Millisecond}
	d := Diagnostic{Timeout: time.Minute}
	script := detach("", pidFile, ">/dev/null 2>&1") + `; echo started`
	res := runBounded(t, context.Background(), r, d, []string{"/bin/sh", "-c", script}, d.Timeout)
	pid := readPID(t, pidFile)
	if res.Outcome != outcome.Succeeded || res.Err != nil {
		t.Fatalf("outcome = %s err = %v", res.Outcome, res.Err)
	}
	assertReaped(t, pid)
}

func TestUnmarkedHolderStopsReadingAtTimeout(t *testing.T) {
	withSetupTimeout(t, func(t *testing.T, timeout time.Duration) bool {
		pidFile := filepath.Join(t.TempDir(), "pid")
		echoedFile := filepath.Join(t.TempDir(), "echoed")
		killOnCleanup(t, pidFile)
		r := &Runner{KillGrace: 100 * time.Millisecond}
		d := Diagnostic{Timeout: timeout}
		// env -i drops the run's id, so nothing ties the sleep to its run
		// once the shell has exited: only the read deadline ends the run.
		// After its output the shell notes the time (ns), to tell whether
		// the output came before the timeout.
		script := detach("/usr/bin/env -i", pidFile, "") + `; echo started; date +%s%N > ` + echoedFile
		bound := d.Timeout + r.KillGrace + reapTimeout
		before := time.Now()
		res := runBounded(t, context.Background(), r, d, []string{"/bin/sh", "-c", script}, bound)
		b, err := os.ReadFile(echoedFile)
		if err != nil {
			return false
		}
		// Run's deadline is at least before+timeout.
		if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil || !time.Unix(0, ns).Before(before.Add(timeout)) {
			return false
		}
		if res.Outcome != outcome.TimedOut || res.Duration < d.Timeout || res.Duration > bound {
			t.Fatalf("outcome = %s after %.2fs, want %s at %.2fs", res.Outcome, res.Duration.Seconds(), outcome.TimedOut, d.Timeout.Seconds())
		}
		if !strings.Contains(string(res.Output), "started") {
			t.Fatalf("output before the timeout lost: %q", res.Output)
		}
		return true
	})
}

func TestFinishingOneRunSparesAnothersDescendants(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	killOnCleanup(t, pidFile)
	r := &Runner{KillGrace: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan Result, 1)
	// The subshell exits at once, so its setsid'd sleep is an orphan of
	// run A while A's leader keeps running.
	scriptA := `(setsid sleep 300 >/dev/null 2>&1 & echo $! > ` + pidFile + `); exec sleep 300`
	go func() {
		done <- r.Run(ctx, Diagnostic{Timeout: time.Hour}, []string{"/bin/sh", "-c", scriptA})
	}()
	orphan := readPID(t, pidFile)
	deadline := time.Now().Add(10 * time.Second)
	for parentOf(orphan) != os.Getpid() {
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d never reparented to the test process (parent %d)", orphan, parentOf(orphan))
		}
		time.Sleep(5 * time.Millisecond)
	}

	if res := run(t, r, Diagnostic{Timeout: time.Minute}, "/bin/true"); res.Outcome != outcome.Succeeded {
		t.Fatalf("run B: %s %v", res.Outcome, res.Err)
	}
	if !alive(orphan) {
		t.Fatal("finishing run B killed a descendant of run A")
	}

	cancel()
	if res := <-done; res.Outcome != Cancelled {
		t.Fatalf("run A: outcome %s", res.Outcome)
	}
	if exists(orphan) {
		t.Fatalf("run A's orphan %d survived it", orphan)
	}
}

// TestNothingLeft: the shortcut that skips searching every process holds
// while no child of the agent but the leaders carries the run's marker or
// is a zombie to reap; an orphan of the run, reparented to the agent,
// sends the sweep the long way, one of another run does not. The orphan's
// leader is forked by a thread other than the main one: the kernel hands
// the orphan to the main thread, the one list the shortcut reads.
func TestNothingLeft(t *testing.T) {
	procs.once.Do(procs.init)
	if procs.root != os.Getpid() {
		t.Skip("no subreaper here: the shortcut is off")
	}
	leader := exec.CommandContext(t.Context(), "/bin/sleep", "30")
	leader.Env = []string{RunIDVar + "=mine"}
	if err := procs.start(leader); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = leader.Process.Kill()
		_ = leader.Wait()
		procs.exited(leader.Process.Pid)
	}()
	if !procs.nothingLeft("mine") {
		t.Fatal("nothingLeft = false with only a registered leader as child")
	}
	// A leader that leaves an orphan behind, started and waited for on a
	// thread of its own.
	type started struct {
		orphan int
		tid    int
		err    error
	}
	done := make(chan started)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		parent := exec.CommandContext(t.Context(), "/bin/sh", "-c", "/bin/sleep 30 </dev/null >/dev/null 2>&1 & echo $!")
		parent.Env = []string{RunIDVar + "=mine"}
		var out bytes.Buffer
		parent.Stdout = &out
		s := started{tid: syscall.Gettid()}
		if s.err = procs.start(parent); s.err == nil {
			s.err = parent.Wait()
			procs.exited(parent.Process.Pid)
			s.orphan, _ = strconv.Atoi(strings.TrimSpace(out.String()))
		}
		done <- s
	}()
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if s.orphan <= 0 {
		t.Fatal("no orphan's pid")
	}
	defer func() {
		_ = syscall.Kill(s.orphan, syscall.SIGKILL)
		_, _ = unix.Wait4(s.orphan, nil, 0, nil)
	}()
	if s.tid == os.Getpid() {
		t.Log("the leader was forked by the main thread")
	}
	if ppid := parentOf(s.orphan); ppid != os.Getpid() {
		t.Fatalf("orphan %d has parent %d, not the agent %d", s.orphan, ppid, os.Getpid())
	}
	if procs.nothingLeft("mine") {
		t.Fatal("nothingLeft = true with an orphan carrying the run's marker")
	}
	if !procs.nothingLeft("another") {
		t.Fatal("nothingLeft = false for another run, with an orphan of this one alive")
	}
}

// TestSettled: a zombie child that no start has registered settles once
// registered or reaped, and never while no start is under way, as a dead
// orphan would stay.
func TestSettled(t *testing.T) {
	procs.once.Do(procs.init)
	if procs.root != os.Getpid() {
		t.Skip("no subreaper here: the shortcut is off")
	}
	child := exec.CommandContext(t.Context(), "/bin/true")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	deadline := time.Now().Add(reapTimeout)
	for {
		if zombie, _ := isZombie(pid); zombie {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never became a zombie")
		}
		time.Sleep(reapPoll)
	}
	if procs.settled([]int{pid}) {
		t.Fatal("settled = true for an unregistered zombie with no start under way")
	}
	procs.leadersMu.Lock()
	procs.leaders[pid] = true
	procs.leadersMu.Unlock()
	if !procs.settled([]int{pid}) {
		t.Fatal("settled = false for a registered leader")
	}
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	procs.exited(pid)
	if !procs.settled([]int{pid}) {
		t.Fatal("settled = false for a child already waited for")
	}
}

// isZombie reads pid's state; ok is false when pid is gone or unreadable.
func isZombie(pid int) (zombie, ok bool) {
	fd, err := syscall.Open("/proc/"+strconv.Itoa(pid)+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false, false
	}
	var buf [1024]byte
	n, err := syscall.Read(fd, buf[:])
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return false, false
	}
	b := buf[:n]
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false, false
	}
	return b[i+2] == 'Z', true
}

// BenchmarkNothingLeft is the end-of-run check of a run that left nothing
// behind, in a process with as many threads as the agent has at 16
// workers, each blocked in a system call (waiting for a diagnostic), and
// 16 registered leaders running: the check runs at the end of every run
// (BenchmarkSQSIntake, agent-redis).
func BenchmarkNothingLeft(b *testing.B) {
	procs.once.Do(procs.init)
	if procs.root != os.Getpid() {
		b.Skip("no subreaper here: the shortcut is off")
	}
	release := make(chan struct{})
	defer close(release)
	for range 16 {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			<-release
		}()
	}
	for range 16 {
		leader := exec.CommandContext(b.Context(), "/bin/sleep", "30")
		leader.Env = []string{RunIDVar + "=another"}
		if err := procs.start(leader); err != nil {
			b.Fatal(err)
		}
		defer func() {
			_ = leader.Process.Kill()
			_ = leader.Wait()
			procs.exited(leader.Process.Pid)
		}()
	}
	b.ReportAllocs()
	for b.Loop() {
		if !procs.nothingLeft("mine") {
			b.Fatal("nothingLeft = false")
		}
	}
}
