package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/autodiag/autodiag/internal/testenv"
)

// Process is a child started in a process group of its own, so that it
// and whatever it started can be killed together.
type Process struct {
	Cmd *exec.Cmd

	done chan struct{}
	err  error
	once sync.Once
}

// StartProcess starts cmd in its own process group and reaps it.
func StartProcess(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the child's process id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Done is closed once the child has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Alive reports whether the child is still running.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err is what Wait returned; nil while the child runs.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// ExitCode is the child's exit status, -1 while it runs or when a signal
// ended it.
func (p *Process) ExitCode() int {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// Wait returns the exit code once the child has exited, or false when it
// still runs after d.
func (p *Process) Wait(d time.Duration) (int, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode(), true
	case <-t.C:
		return -1, false
	}
}

// Signal sends sig to the child alone.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %d: %w", sig, p.Pid(), err)
	}
	return nil
}

// Kill sends SIGKILL to the child alone and waits until it is gone.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// KillTree ends the child as a dying instance ends: it is stopped first so
// that it starts nothing more, then the process groups of its children (an
// agent runs each diagnostic in a group of its own) and its own are
// killed, and it is reaped.
func (p *Process) KillTree() {
	p.once.Do(func() {
		if !p.Alive() {
			return
		}
		pid := p.Pid()
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		killTree(pid, childrenByParent())
	})
	<-p.done
}

// killTree kills the process groups of pid's children, then pid's own.
func killTree(pid int, children map[int][]int) {
	for _, child := range children[pid] {
		_ = syscall.Kill(-child, syscall.SIGKILL)
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// childrenByParent maps each process to its children, from /proc.
func childrenByParent() map[int][]int {
	out := map[int][]int{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			out[ppid] = append(out[ppid], pid)
		}
	}
	return out
}

// FreeAddr is a loopback host:port nothing listened on a moment ago.
func FreeAddr() (string, error) {
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Until polls cond until it holds (true) or d has passed (false): 5 ms
// after the first try, then twice as long each time up to untilMaxPoll.
// A condition is often an HTTP request to an agent (its metrics or a
// record), which the agent answers and the test parses under -race: at a
// fixed 5 ms, polling was 13 % of cmd/autodiag's test binary's CPU in a
// cold CI run (issue 44), for waits that mostly last seconds; a wait that
// ends within 15 ms polls as before.
func Until(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	poll := 5 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(poll)
		poll = min(2*poll, untilMaxPoll)
	}
	return true
}

// untilMaxPoll is Until's longest pause between two tries: what a wait may
// last beyond the moment its condition came true.
const untilMaxPoll = 40 * time.Millisecond

// ReleaseEnv and ReleaseFlags are the settings of .goreleaser.yaml's build
// (its env and flags) that decide what the compiler produces, and
// ReleaseLdflags the part of its ldflags that is not a version stamp.
// Build uses them, so the binary the end-to-end tests run is the one the
// release ships, and its compile is the release's: the Go build cache
// holds one compile of the agent and its dependencies for both (and for
// scripts/release-check's builds), not a second one with cgo and full
// paths, which cost ~230 CPU seconds on a fresh machine (docs/RESULTS.md,
// Cold CI). cmd/autodiag's TestHarnessBuildIsReleaseBuild checks them
// against .goreleaser.yaml.
var (
	ReleaseEnv     = []string{"CGO_ENABLED=0"}
	ReleaseFlags   = []string{"-trimpath", "-gcflags=all=-dwarf=false"}
	ReleaseLdflags = "-s -w"
)

// Build compiles ./cmd/autodiag of this module into dir, with the
// release's settings (ReleaseEnv, ReleaseFlags, ReleaseLdflags, no
// version stamp), and returns the binary's path.
func Build(ctx context.Context, dir string) (string, error) {
	// Under scripts/test.sh the agent is being built with these settings
	// in the background: link it from the build cache once that ends.
	if err := testenv.WaitForBuilds(); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "autodiag")
	args := append([]string{"build"}, ReleaseFlags...)
	args = append(args, "-ldflags="+ReleaseLdflags, "-o", bin, "github.com/autodiag/autodiag/cmd/autodiag")
	build := exec.CommandContext(ctx, "go", args...)
	build.Env = append(os.Environ(), ReleaseEnv...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building autodiag: %w", err)
	}
	return bin, nil
}

// Run runs the binary bin with args to its end, as a CLI command: PATH,
// HOME=home and env, bounded by ctx. It returns the exit code, stdout and
// stderr; err is set when the command could not run or ctx ended it.
func Run(ctx context.Context, bin, home string, env []string, args ...string) (code int, stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return -1, out.String(), errOut.String(), fmt.Errorf("%v: %w", args, ctx.Err())
	case err != nil && !errors.As(err, &ee):
		return -1, out.String(), errOut.String(), fmt.Errorf("%v: %w", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String(), nil
}
