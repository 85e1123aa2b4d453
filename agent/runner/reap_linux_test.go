package runner

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
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
// is a zombie to reap; a child with the run's marker (an orphan
// reparented to the agent looks the same) sends the sweep the long way,
// one with another run's marker does not.
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
	orphan := exec.CommandContext(t.Context(), "/bin/sleep", "30")
	orphan.Env = []string{RunIDVar + "=mine"}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = orphan.Process.Kill(); _ = orphan.Wait() }()
	// Until exec the child shows the test's environment: wait for the
	// marker, as a sweep would see it.
	deadline := time.Now().Add(reapTimeout)
	for {
		if run, _ := runMarker(orphan.Process.Pid); run == "mine" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never showed its marker")
		}
		time.Sleep(reapPoll)
	}
	if procs.nothingLeft("mine") {
		t.Fatal("nothingLeft = true with a child carrying the run's marker")
	}
	if !procs.nothingLeft("another") {
		t.Fatal("nothingLeft = false for another run, with a child of this one alive")
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

// TestThreads: the raw directory read lists the same thread ids as
// os.ReadDir does, sorted. The runtime may start a thread between the two
// reads, so it takes one agreement in a few tries.
func TestThreads(t *testing.T) {
	var got, want []int
	for range 3 {
		entries, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		want = want[:0]
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, tid)
		}
		slices.Sort(want)
		var lists childLists
		cached, ok := lists.threads(nil)
		if got = threads(nil); ok && slices.Equal(got, want) && slices.Equal(cached, want) {
			return
		}
	}
	t.Fatalf("threads() = %v, /proc/self/task lists %v", got, want)
}

// TestChildListsFollowThreads: the children lists kept open are read
// again with what changed since: a child forked after a file was opened
// is listed, the file of a thread that exited is closed, and files unused
// for childListsFresh are opened afresh.
func TestChildListsFollowThreads(t *testing.T) {
	now := time.Now()
	lists := childLists{now: func() time.Time { return now }}
	defer func() {
		lists.mu.Lock()
		lists.closeLocked()
		lists.mu.Unlock()
	}()
	// A thread of its own: a goroutine that exits locked to its thread
	// ends the thread.
	tidc, forked, exit := make(chan int), make(chan int), make(chan struct{})
	var child *exec.Cmd
	go func() {
		runtime.LockOSThread()
		tidc <- syscall.Gettid()
		<-forked
		child = exec.CommandContext(t.Context(), "/bin/sleep", "30")
		if err := child.Start(); err != nil {
			t.Error(err)
			close(exit)
			return
		}
		exit <- struct{}{}
		<-exit
	}()
	tid := <-tidc
	if tid == os.Getpid() {
		t.Skip("the goroutine runs on the main thread, which never exits")
	}
	_, kids, ok := lists.read(nil, nil)
	if !ok {
		t.Fatal("read: cannot tell")
	}
	if _, open := lists.fds[tid]; !open {
		t.Fatalf("thread %d's children list not open after a read", tid)
	}
	forked <- 0
	<-exit
	if child == nil {
		t.FailNow()
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	if slices.Contains(kids, child.Process.Pid) {
		t.Fatalf("child %d listed before it was forked", child.Process.Pid)
	}
	if _, kids, ok = lists.read(nil, nil); !ok || !slices.Contains(kids, child.Process.Pid) {
		t.Fatalf("read = %v, %v: child %d, forked by thread %d after its list was opened, not listed", kids, ok, child.Process.Pid, tid)
	}
	exit <- struct{}{}
	deadline := time.Now().Add(reapTimeout)
	for {
		if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d still there", tid)
		}
		time.Sleep(reapPoll)
	}
	if _, _, ok = lists.read(nil, nil); !ok {
		t.Fatal("read: cannot tell")
	}
	if _, open := lists.fds[tid]; open {
		t.Fatalf("thread %d exited, its children list still open", tid)
	}
	opened := lists.opened
	if _, _, ok = lists.read(nil, nil); !ok || lists.opened != opened {
		t.Fatalf("read = %v, files opened %d times then %d: want them kept", ok, opened, lists.opened)
	}
	now = now.Add(childListsFresh)
	if _, _, ok = lists.read(nil, nil); !ok || lists.opened != opened {
		t.Fatalf("read = %v, files opened %d times then %d: want them kept within %v", ok, opened, lists.opened, childListsFresh)
	}
	now = now.Add(childListsFresh + time.Nanosecond)
	if _, _, ok = lists.read(nil, nil); !ok || lists.opened != opened+1 {
		t.Fatalf("read = %v, files opened %d times then %d: want them opened again once unused for %v", ok, opened, lists.opened, childListsFresh)
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
