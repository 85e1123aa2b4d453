package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/autodiag/autodiag/internal/configerr"
	"github.com/autodiag/autodiag/internal/outcome"
)

// A run ends in outcome.Succeeded, outcome.Failed, outcome.TimedOut, or
// Cancelled: the caller's context ended (drain deadline) and the agent
// releases the task, so Cancelled is never a task's outcome.
const Cancelled = "cancelled"

// Size is a byte count that reads "64KiB", "1MiB", "512" in YAML.
type Size int64

// ParseSize parses a size with an optional B, KiB, MiB, GiB (or KB, MB, GB,
// taken as powers of 1024 as well) suffix.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (want e.g. 65536, 64KiB, 1MiB)", s)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(n * mult), nil
}

// UnmarshalText lets YAML and env decode sizes.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText prints a size the way ParseSize reads it.
func (s Size) MarshalText() ([]byte, error) {
	switch {
	case s > 0 && s%(1<<20) == 0:
		return []byte(fmt.Sprintf("%dMiB", s>>20)), nil
	case s > 0 && s%(1<<10) == 0:
		return []byte(fmt.Sprintf("%dKiB", s>>10)), nil
	}
	return []byte(strconv.FormatInt(int64(s), 10)), nil
}

// Diagnostic is one catalog entry (`diagnostics:` in the config).
type Diagnostic struct {
	Name string `yaml:"name"`
	// Command is the argv; each element may hold {host}, {id} and
	// {param.NAME} placeholders, substituted inside that one element.
	Command []string `yaml:"command"`
	// Params maps each accepted parameter to the pattern its value must
	// match in full.
	Params map[string]string `yaml:"params"`
	// Charset lifts, for the parameters it names (NAME: any), the default
	// character set of a value (task.ParamCharset), which the pattern
	// otherwise only narrows. config validate warns for each.
	Charset   map[string]string `yaml:"charset"`
	Timeout   time.Duration     `yaml:"timeout"`    // default 2m
	MaxOutput Size              `yaml:"max_output"` // default 64KiB
	// Investigate offers the diagnostic to root-cause investigations as a
	// tool described by Description (default false: never offered).
	Investigate bool   `yaml:"investigate"`
	Description string `yaml:"description"`
	// RunsOn says where the diagnostic may run: RunsOnTarget (it looks at
	// the machine itself: df, free, journalctl) runs only on the agent of
	// the task's host; RunsOnAny (it probes {host} from wherever it runs:
	// dig, curl) runs on whichever agent receives it. Empty = target when
	// the command does not use {host}, any when it does (see Targeted).
	RunsOn string `yaml:"runs_on"`
	// Approval is ApprovalRequired when a person must approve each task
	// of the diagnostic before it runs (docs/approvals.md); empty = none.
	Approval string `yaml:"approval"`
	// ApprovalTimeout is how long a task waits for that approval before
	// it ends denied (default 15m; at most 12h).
	ApprovalTimeout time.Duration `yaml:"approval_timeout"`
}

// ApprovalRequired is the one value of Diagnostic.Approval.
const ApprovalRequired = "required"

// Bounds of Diagnostic.ApprovalTimeout.
const (
	DefaultApprovalTimeout = 15 * time.Minute
	MaxApprovalTimeout     = 12 * time.Hour
)

// Values of a Diagnostic's RunsOn.
const (
	RunsOnTarget = "target"
	RunsOnAny    = "any"
)

// UsesHost reports whether the command references {host}.
func (d Diagnostic) UsesHost() bool {
	for _, arg := range d.Command {
		if strings.Contains(arg, "{host}") {
			return true
		}
	}
	return false
}

// Targeted reports whether the diagnostic describes the machine that runs
// it, so that it must run on the agent of the task's host: runs_on target,
// or no runs_on and no {host} in the command.
func (d Diagnostic) Targeted() bool {
	switch d.RunsOn {
	case RunsOnTarget:
		return true
	case RunsOnAny:
		return false
	}
	return !d.UsesHost()
}

// CharsetAny is the one value of Diagnostic.Charset: the parameter's
// value may hold any character its pattern allows.
const CharsetAny = "any"

// AnyCharset reports whether the parameter name's values may hold more
// than the default character set.
func (d Diagnostic) AnyCharset(name string) bool { return d.Charset[name] == CharsetAny }

// Defaults of a Diagnostic's optional fields.
const (
	DefaultTimeout   = 2 * time.Minute
	DefaultMaxOutput = Size(64 << 10)
	maxMaxOutput     = Size(16 << 20)
)

var (
	namePattern        = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	paramNamePattern   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	placeholderPattern = regexp.MustCompile(`\{[^{}]*\}`)
)

// Placeholders returns the parameter names the command references.
func (d Diagnostic) Placeholders() []string {
	var out []string
	for _, arg := range d.Command {
		for _, ph := range placeholderPattern.FindAllString(arg, -1) {
			if name, ok := strings.CutPrefix(ph[1:len(ph)-1], "param."); ok {
				out = append(out, name)
			}
		}
	}
	return out
}

// Validate reports every problem of d, each a *configerr.Error whose key is
// relative to the catalog entry.
func (d Diagnostic) Validate() error {
	var errs []error
	if !namePattern.MatchString(d.Name) {
		errs = append(errs, configerr.Errorf("name", "%q must match %s", d.Name, namePattern))
	}
	if len(d.Command) == 0 {
		errs = append(errs, configerr.Errorf("command", "must not be empty"))
	} else if !strings.HasPrefix(d.Command[0], "/") || strings.Contains(d.Command[0], "{") {
		errs = append(errs, configerr.Errorf("command[0]", "%q must be an absolute path without placeholders", d.Command[0]))
	}
	for i, arg := range d.Command {
		for _, ph := range placeholderPattern.FindAllString(arg, -1) {
			inner := ph[1 : len(ph)-1]
			switch {
			case inner == "host" || inner == "id":
			case strings.HasPrefix(inner, "param."):
				name := strings.TrimPrefix(inner, "param.")
				if _, ok := d.Params[name]; !ok {
					errs = append(errs, configerr.Errorf(fmt.Sprintf("command[%d]", i), "placeholder %s has no pattern under params", ph))
				}
			default:
				errs = append(errs, configerr.Errorf(fmt.Sprintf("command[%d]", i), "unknown placeholder %s (want {host}, {id} or {param.NAME})", ph))
			}
		}
	}
	for name, pat := range d.Params {
		if !paramNamePattern.MatchString(name) {
			errs = append(errs, configerr.Errorf("params."+name, "parameter names must match %s", paramNamePattern))
		}
		if _, err := regexp.Compile(pat); err != nil {
			errs = append(errs, configerr.Errorf("params."+name, "invalid pattern: %w", err))
		}
	}
	for name, cs := range d.Charset {
		if _, ok := d.Params[name]; !ok {
			errs = append(errs, configerr.Errorf("charset."+name, "names no parameter under params"))
		}
		if cs != CharsetAny {
			errs = append(errs, configerr.Errorf("charset."+name, "must be %q (leave the parameter out for the default character set), got %q", CharsetAny, cs))
		}
	}
	switch d.RunsOn {
	case "", RunsOnTarget:
	case RunsOnAny:
		if !d.UsesHost() {
			// Such an entry describes the agent that runs it, not the
			// task's host: run anywhere, it would label one machine's
			// output as another's.
			errs = append(errs, configerr.Errorf("runs_on", "diagnostic %q: runs_on any needs {host} in the command; without it the output describes whichever agent runs it, not the task's host (use runs_on target)", d.Name))
		}
	default:
		errs = append(errs, configerr.Errorf("runs_on", "diagnostic %q: must be %q or %q, not %q", d.Name, RunsOnTarget, RunsOnAny, d.RunsOn))
	}
	switch d.Approval {
	case "", ApprovalRequired:
	default:
		errs = append(errs, configerr.Errorf("approval", "must be %q (leave it out when no approval is needed), not %q", ApprovalRequired, d.Approval))
	}
	if d.ApprovalTimeout < 0 || d.ApprovalTimeout > MaxApprovalTimeout {
		errs = append(errs, configerr.Errorf("approval_timeout", "must be between 1s and %s, not %s", MaxApprovalTimeout, d.ApprovalTimeout))
	} else if d.ApprovalTimeout > 0 && d.Approval != ApprovalRequired {
		errs = append(errs, configerr.Errorf("approval_timeout", "is set but approval is not %q: nothing waits for it", ApprovalRequired))
	}
	if d.Timeout < 0 {
		errs = append(errs, configerr.Errorf("timeout", "must be positive"))
	}
	if d.MaxOutput < 0 || d.MaxOutput > maxMaxOutput {
		errs = append(errs, configerr.Errorf("max_output", "must be between 1 and %d bytes", maxMaxOutput))
	}
	return errors.Join(errs...)
}

// WithDefaults fills the optional fields.
func (d Diagnostic) WithDefaults() Diagnostic {
	if d.Timeout == 0 {
		d.Timeout = DefaultTimeout
	}
	if d.MaxOutput == 0 {
		d.MaxOutput = DefaultMaxOutput
	}
	if d.Approval == ApprovalRequired && d.ApprovalTimeout == 0 {
		d.ApprovalTimeout = DefaultApprovalTimeout
	}
	return d
}

// Args substitutes placeholders in the command. Values must already be
// validated; each stays inside the one argv element it was placed in.
func (d Diagnostic) Args(host, id string, params map[string]string) []string {
	out := make([]string, len(d.Command))
	for i, arg := range d.Command {
		out[i] = placeholderPattern.ReplaceAllStringFunc(arg, func(ph string) string {
			switch inner := ph[1 : len(ph)-1]; {
			case inner == "host":
				return host
			case inner == "id":
				return id
			case strings.HasPrefix(inner, "param."):
				return params[strings.TrimPrefix(inner, "param.")]
			}
			return ph
		})
	}
	return out
}

// Result is what one run produced.
type Result struct {
	Outcome   string // outcome.Succeeded, outcome.Failed, outcome.TimedOut or Cancelled
	ExitCode  int    // -1 when killed or not started
	Output    []byte // stdout and stderr interleaved, at most MaxOutput bytes
	Truncated bool
	Duration  time.Duration
	Err       error // start failure, signal, output held open or processes that survived: for the log
}

// TruncationMark is appended to output cut at max_output.
const TruncationMark = "\n[autodiag: output truncated]\n"

// Runner executes diagnostics.
type Runner struct {
	// Env is the environment of every diagnostic, to which the runner adds
	// RunIDVar; nil means DefaultEnv().
	Env []string
	// KillGrace is how long a process group has between SIGTERM and
	// SIGKILL; default 5s.
	KillGrace time.Duration
}

// DefaultEnv returns the environment diagnostics get unless Runner.Env is
// set: a minimal PATH and LC_ALL=C.
func DefaultEnv() []string {
	return []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
}

// RunIDVar names the environment variable that marks every process of one
// run: a diagnostic's descendants inherit it even after setsid or a double
// fork, which is how the runner finds what a diagnostic left behind.
const RunIDVar = "AUTODIAG_RUN_ID"

func newRunID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("runner: run id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Run executes argv (from Diagnostic.Args) bounded by d's timeout and
// output cap. Cancelling ctx kills the run and yields Cancelled. When Run
// returns, no process of the run is left (see the package doc for the one
// exception).
func (r *Runner) Run(ctx context.Context, d Diagnostic, argv []string) Result {
	d = d.WithDefaults()
	grace := r.KillGrace
	if grace <= 0 {
		grace = 5 * time.Second
	}
	env := r.Env
	if env == nil {
		env = DefaultEnv()
	}
	start := time.Now()
	deadline := start.Add(d.Timeout)
	res := Result{ExitCode: -1}

	id, err := newRunID()
	if err != nil {
		res.Outcome, res.Err = outcome.Failed, err
		return res
	}
	pr, pw, err := outputPipe()
	if err != nil {
		res.Outcome, res.Err = outcome.Failed, fmt.Errorf("runner: pipe: %w", err)
		return res
	}
	defer pr.Close()
	// Not CommandContext: ctx and the timeout end the run below, with
	// SIGTERM to the whole process group and SIGKILL after the grace;
	// CommandContext would SIGKILL the leader alone, at once.
	cmd := exec.Command(argv[0], argv[1:]...) //nolint:noctx // see above
	cmd.Env = append(slices.Clip(env), RunIDVar+"="+id)
	cmd.Dir = "/"
	if in := nullInput(); in != nil {
		cmd.Stdin = in
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := procs.start(cmd); err != nil {
		pw.Close()
		res.Outcome, res.Err, res.Duration = outcome.Failed, fmt.Errorf("runner: start %s: %w", argv[0], err), time.Since(start)
		return res
	}
	pw.Close() // the children hold the only write ends now
	pgid := cmd.Process.Pid

	// Reading ends at the timeout whoever still holds the write end: a
	// process that left the run's reach must not stretch the run.
	var deadlineErr error
	if err := pr.SetReadDeadline(deadline); err != nil {
		deadlineErr = fmt.Errorf("runner: output deadline: %w", err)
	}
	outc := make(chan capture, 1)
	go func() { outc <- readCapped(pr, int(d.MaxOutput)) }()

	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var waitErr error
	stopped := ""
	select {
	case waitErr = <-waitc:
	case <-timer.C:
		stopped = outcome.TimedOut
	case <-ctx.Done():
		stopped = Cancelled
		_ = pr.SetReadDeadline(time.Now())
	}
	if stopped != "" {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		kill := time.NewTimer(grace)
		select {
		case waitErr = <-waitc:
			kill.Stop()
		case <-kill.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			waitErr = <-waitc
		}
	}
	procs.exited(pgid)
	// The leader is gone; what it left in its group and anything else of
	// the run (a setsid daemon, a double fork) dies with it and releases
	// the output pipe.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	reapErr := procs.finish(id)
	out := <-outc

	res.Duration = time.Since(start)
	res.Output, res.Truncated = out.data, out.truncated
	if res.Truncated {
		res.Output = append(res.Output, TruncationMark...)
	}
	if cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	switch {
	case stopped != "":
		res.Outcome = stopped
	case errors.Is(out.err, os.ErrDeadlineExceeded):
		// The leader ended in time, but something out of reach held its
		// output open until the timeout.
		res.Outcome = outcome.TimedOut
		res.Err = errors.New("runner: output still open at the timeout after the diagnostic exited")
	case waitErr == nil:
		res.Outcome = outcome.Succeeded
	default:
		res.Outcome = outcome.Failed
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) {
			res.Err = waitErr
		} else if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Err = fmt.Errorf("runner: killed by %v", ws.Signal())
		}
	}
	res.Err = errors.Join(res.Err, deadlineErr, reapErr)
	return res
}

// nullInput is /dev/null, opened once for the whole process and given to
// every run as its standard input (nil if it cannot be opened: os/exec
// then opens it itself). With Stdin nil, os/exec opens, sets up and closes
// /dev/null for every run: seven system calls for the same empty input.
var nullInput = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil
	}
	return f
})

type capture struct {
	data      []byte
	truncated bool
	err       error // nil at end of file
}

// Output is read in place into a buffer that doubles from minRead up to
// the cap plus room for TruncationMark, and past the cap into one
// discardChunk, so however much a diagnostic writes, its run allocates
// about twice its max_output in all and holds at most about one and a half
// times it at once (old and new buffer during the last doubling).
const (
	minRead      = 512
	discardChunk = 32 << 10
)

// readCapped keeps the first limit bytes and drains the rest, so a chatty
// process never blocks on a full pipe; it returns at end of file or at
// the first read error (the deadline).
func readCapped(r io.Reader, limit int) capture {
	var c capture
	var buf, scratch []byte
	for {
		var n int
		var err error
		if len(buf) < limit {
			if len(buf) == cap(buf) {
				size := max(2*cap(buf), minRead)
				if size >= limit {
					size = limit + len(TruncationMark)
				}
				buf = append(make([]byte, 0, size), buf...)
			}
			n, err = r.Read(buf[len(buf):min(cap(buf), limit)])
			buf = buf[:len(buf)+n]
		} else {
			if scratch == nil {
				scratch = make([]byte, discardChunk)
			}
			n, err = r.Read(scratch)
			c.truncated = c.truncated || n > 0
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.err = err
			}
			c.data = buf
			return c
		}
	}
}
