package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// How long finishing a run waits for the processes it killed to be gone,
// and how often it looks. SIGKILL takes effect within milliseconds unless
// a process is stuck in the kernel.
const (
	reapTimeout = time.Second
	reapPoll    = 5 * time.Millisecond
)

// How often, and how many times, the shortcut that skips searching every
// process looks again at children it could not place while starts are under
// way: a leader that exits at once is a zombie before its start registers
// it, and waiting a few scheduler ticks for that is far cheaper than
// reading every process on the machine.
const (
	settlePoll  = 100 * time.Microsecond
	settleTries = 10
)

// The subreaper attribute and the process's children belong to the whole
// process, not to one Runner, so the bookkeeping that goes with them is
// process-wide too.
var procs = &reaper{leaders: map[int]bool{}}

// reaper keeps a diagnostic's orphans in the agent's own process tree
// (PR_SET_CHILD_SUBREAPER) and ends them with their run.
type reaper struct {
	once    sync.Once
	root    int // the process whose subtree is searched: the agent, or 1 without the subreaper
	pgid    int // the agent's own process group, never a diagnostic's
	initErr error

	// mu orders starting (and registering) a leader against a sweep, so a
	// leader that exits at once is never taken for an orphan: starts hold
	// it shared, so that runs fork in parallel, a sweep exclusively.
	mu sync.RWMutex
	// leadersMu guards leaders, which starts write concurrently.
	leadersMu sync.Mutex
	leaders   map[int]bool // pids os/exec will wait for
	// starting counts starts not yet registered: while it is above zero,
	// a child that is no registered leader may be one about to be.
	starting atomic.Int32

	// lists reads the agent's children list for nothingLeft.
	lists childList
}

func (rp *reaper) init() {
	rp.pgid = syscall.Getpgrp()
	rp.root = os.Getpid()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		// Orphans then go to init, which reaps them; the marker still finds
		// them to kill, by searching every process.
		rp.root, rp.initErr = 1, fmt.Errorf("runner: PR_SET_CHILD_SUBREAPER: %w", err)
	}
}

// start starts cmd and registers its leader in one step.
func (rp *reaper) start(cmd *exec.Cmd) error {
	rp.once.Do(rp.init)
	rp.mu.RLock()
	defer rp.mu.RUnlock()
	rp.starting.Add(1)
	defer rp.starting.Add(-1) // after the registration below
	if err := cmd.Start(); err != nil {
		return err
	}
	rp.leadersMu.Lock()
	rp.leaders[cmd.Process.Pid] = true
	rp.leadersMu.Unlock()
	return nil
}

// exited forgets a leader once os/exec has waited for it.
func (rp *reaper) exited(pid int) {
	rp.leadersMu.Lock()
	delete(rp.leaders, pid)
	rp.leadersMu.Unlock()
}

// finish kills every remaining process of run id and returns once they are
// gone and reaped, or after reapTimeout with an error naming how many
// remain. Processes of other runs are left alone.
func (rp *reaper) finish(id string) error {
	deadline := time.Now().Add(reapTimeout)
	for {
		left := rp.sweep(id)
		if left == 0 {
			return rp.initErr
		}
		if time.Now().After(deadline) {
			return errors.Join(rp.initErr, fmt.Errorf("runner: %d processes of the run survived SIGKILL for %.1fs", left, reapTimeout.Seconds()))
		}
		time.Sleep(reapPoll)
	}
}

// sweep sends SIGKILL to the live processes of run id, reaps dead orphans
// (of any run) reparented to the agent, and returns how many processes of
// run id are not yet gone.
func (rp *reaper) sweep(id string) int {
	if rp.nothingLeft(id) {
		return 0
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	rp.leadersMu.Lock()
	defer rp.leadersMu.Unlock()
	self := os.Getpid()
	left := 0
	for _, p := range rp.tree() {
		if rp.leaders[p.pid] {
			continue
		}
		// A dead child of the agent outside the agent's process group is a
		// diagnostic's orphan: os/exec waits only for the leaders above.
		if p.zombie && p.ppid == self && p.pgid != rp.pgid {
			if wpid, err := unix.Wait4(p.pid, nil, unix.WNOHANG, nil); err == nil && wpid == p.pid {
				continue
			}
		}
		if p.unreadable && !p.zombie && p.ppid == self && p.pgid != rp.pgid {
			// A diagnostic's orphan on its way out: SIGKILL took its
			// memory, so its marker is gone, but it is not a zombie to
			// reap yet. Look again until it is.
			left++
			continue
		}
		if p.run != id {
			continue
		}
		if !p.zombie {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		left++
	}
	return left
}

// nothingLeft reports whether run id can have left nothing behind and no
// dead orphan waits to be reaped, from one small file, the children list
// of the agent's main thread (/proc/self/task/PID/children), instead of
// every process on the machine, which the full sweep reads. A run's
// processes descend from its leader and, once it is gone, are reparented
// to the agent (the subreaper), so any of them would be a child of the
// agent, or below one, carrying the run's marker (or, its memory gone,
// none that can be read). The kernel hands an orphan to the subreaper's
// first live thread, its main thread (Go never ends that one), so the
// other threads' lists hold only leaders they forked, none of them this
// run's once its leader has been waited for: reading them too cost a
// directory read and a file per thread at the end of every run. A child
// that is a registered leader, or alive with another run's marker or
// none (a leader forked but not yet registered), is no concern of this
// sweep. A zombie or unreadable child that is no leader yet may be a
// leader whose start has not registered it: while starts are under way
// it is looked at again (settled) before giving up. false when it cannot
// tell (no subreaper, no children list, a child still unplaced): then the
// full sweep runs. It reaps and kills nothing, so it needs leadersMu
// only: starts go on.
func (rp *reaper) nothingLeft(id string) bool {
	if rp.root != os.Getpid() {
		return false
	}
	var kidBuf [64]int
	kids, ok := rp.lists.read(rp.root, kidBuf[:0])
	if !ok {
		return false
	}
	var suspects []int
	for _, pid := range kids {
		rp.leadersMu.Lock()
		leader := rp.leaders[pid]
		rp.leadersMu.Unlock()
		if leader {
			continue
		}
		// One read says it all: a zombie's environment, or a gone
		// process's, is unreadable like a dying one's.
		run, unreadable := runMarker(pid)
		if run == id {
			return false
		}
		if unreadable {
			suspects = append(suspects, pid)
		}
	}
	return rp.settled(suspects)
}

// childList reads the children list of the agent's main thread from a
// file it keeps open and reads again from offset 0 (procfs regenerates
// it): the main thread lives as long as the agent, so its id is never
// reused while the file is open.
type childList struct {
	mu   sync.Mutex
	fd   int
	open bool
	// buf is what the list is read into, under mu: on the stack of the
	// run's goroutine, 4 KiB grew (copied) that stack at the end of every
	// run.
	buf [4096]byte
}

// read appends the pids in the children list of thread tid (the main
// thread) to kids; false when it cannot tell.
func (c *childList) read(tid int, kids []int) (_ []int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open {
		fd, err := syscall.Open("/proc/self/task/"+strconv.Itoa(tid)+"/children", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil, false
		}
		c.fd, c.open = fd, true
	}
	buf := &c.buf
	n, err := syscall.Pread(c.fd, buf[:], 0)
	if err != nil || n < 0 || n == len(buf) {
		return nil, false
	}
	// Space-separated pids; a loop rather than bytes.FieldsSeq, whose
	// closure would move buf to the heap.
	for rest := buf[:n]; ; {
		rest = bytes.TrimLeft(rest, " \n")
		if len(rest) == 0 {
			break
		}
		end := bytes.IndexAny(rest, " \n")
		if end < 0 {
			end = len(rest)
		}
		pid, ok := atoi(rest[:end])
		if !ok {
			return nil, false
		}
		kids = append(kids, pid)
		rest = rest[end:]
	}
	return kids, true
}

// settled reports whether every suspect has become a registered leader or
// is gone (waited for by os/exec, or reaped by another sweep), looking
// again while starts are under way, at most settleTries times. A dead or
// dying orphan stays a child until a sweep reaps it, so it never settles.
func (rp *reaper) settled(suspects []int) bool {
	for try := 0; ; try++ {
		suspects = slices.DeleteFunc(suspects, func(pid int) bool {
			rp.leadersMu.Lock()
			leader := rp.leaders[pid]
			rp.leadersMu.Unlock()
			return leader || !inTable(pid)
		})
		if len(suspects) == 0 {
			return true
		}
		if try == settleTries || rp.starting.Load() == 0 {
			return false
		}
		time.Sleep(settlePoll)
	}
}

// inTable reports whether pid is in the process table, a zombie included,
// without reading /proc: signal 0 checks and delivers nothing.
func inTable(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// atoi parses a decimal process id; false for "." and "..".
func atoi(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

type proc struct {
	pid, ppid, pgid int
	zombie          bool
	run             string // the RunIDVar of the process, or of its nearest marked ancestor
	unreadable      bool   // its environment could not be read (or was empty)
}

// tree lists the processes below rp.root, parents before children, each
// attributed to a run. A process whose environment cannot be read (a
// zombie, another user's) belongs to its parent's run; a process directly
// below the root without a marker belongs to none.
func (rp *reaper) tree() []proc {
	all := readProcs()
	var out []proc
	runOf := map[int]string{}
	parents := []int{rp.root}
	for len(parents) > 0 {
		ppid := parents[0]
		parents = parents[1:]
		for _, p := range all {
			if p.ppid != ppid {
				continue
			}
			p.run, p.unreadable = runMarker(p.pid)
			if p.run == "" && p.ppid != rp.root {
				p.run = runOf[p.ppid]
			}
			runOf[p.pid] = p.run
			out = append(out, p)
			parents = append(parents, p.pid)
		}
	}
	return out
}

// readProcs reads pid, parent, group and state of every process. It runs
// at the end of every run, so it reads with raw syscalls into one buffer
// rather than allocating an *os.File per process.
func readProcs() []proc {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	out := make([]proc, 0, len(names))
	var buf [1024]byte
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		fd, err := syscall.Open("/proc/"+name+"/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		n, _ := syscall.Read(fd, buf[:])
		syscall.Close(fd)
		if n <= 0 {
			continue
		}
		// "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
		line := buf[:n]
		i := bytes.LastIndexByte(line, ')')
		if i < 0 {
			continue
		}
		var f [3][]byte
		rest := line[i+1:]
		for k := range f {
			rest = bytes.TrimLeft(rest, " ")
			end := bytes.IndexByte(rest, ' ')
			if end < 0 {
				end = len(rest)
			}
			f[k], rest = rest[:end], rest[end:]
		}
		ppid, _ := strconv.Atoi(string(f[1]))
		pgid, _ := strconv.Atoi(string(f[2]))
		out = append(out, proc{pid: pid, ppid: ppid, pgid: pgid, zombie: bytes.Equal(f[0], []byte("Z"))})
	}
	return out
}

// runMarker returns the RunIDVar in pid's environment, or ""; unreadable
// when the environment could not be read or was empty, as it reads once
// the process's memory is gone (killed, exiting, not yet a zombie).
func runMarker(pid int) (run string, unreadable bool) {
	path := "/proc/" + strconv.Itoa(pid) + "/environ"
	// Most environments here are the runner's few variables: one read
	// into a buffer on the stack, as it runs at the end of every run for
	// each child being started; a longer one is read whole.
	var buf [4096]byte
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", true
	}
	n, err := syscall.Read(fd, buf[:])
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return "", true
	}
	env := buf[:n]
	if n == len(buf) {
		if env, err = os.ReadFile(path); err != nil || len(env) == 0 {
			return "", true
		}
	}
	// A loop rather than bytes.SplitSeq, whose closure would move buf to
	// the heap.
	for len(env) > 0 {
		kv := env
		if i := bytes.IndexByte(env, 0); i >= 0 {
			kv, env = env[:i], env[i+1:]
		} else {
			env = nil
		}
		if v, ok := bytes.CutPrefix(kv, []byte(RunIDVar+"=")); ok {
			return string(v), false
		}
	}
	return "", false
}
