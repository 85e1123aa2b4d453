package runner

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/configerr"
	"github.com/autodiag/autodiag/internal/outcome"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Size
		bad  bool
	}{
		{"65536", 65536, false},
		{"64KiB", 64 << 10, false},
		{"1MiB", 1 << 20, false},
		{"2 GiB", 2 << 30, false},
		{"10B", 10, false},
		{"-1", 0, true},
		{"lots", 0, true},
		{"1.5MiB", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if (err != nil) != tc.bad || got != tc.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d, bad=%v", tc.in, got, err, tc.want, tc.bad)
			}
		})
	}
}

func TestDiagnosticValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Diagnostic
		keys []string // each must appear in the error; none = valid
	}{
		{"ok", Diagnostic{Name: "disk-usage", Command: []string{"/usr/bin/df", "-h", "{param.mount}"}, Params: map[string]string{"mount": `^/.*$`}}, nil},
		{"relative command", Diagnostic{Name: "x", Command: []string{"df"}}, []string{"command[0]:"}},
		{"empty command", Diagnostic{Name: "x"}, []string{"command:"}},
		{"bad name", Diagnostic{Name: "Bad Name", Command: []string{"/bin/true"}}, []string{"name:"}},
		{"undeclared param", Diagnostic{Name: "x", Command: []string{"/bin/echo", "{param.path}"}}, []string{"command[1]: placeholder {param.path}"}},
		{"unknown placeholder", Diagnostic{Name: "x", Command: []string{"/bin/echo", "{env.HOME}"}}, []string{"command[1]: unknown placeholder"}},
		{"bad pattern", Diagnostic{Name: "x", Command: []string{"/bin/true"}, Params: map[string]string{"p": "("}}, []string{"params.p:"}},
		{"several at once", Diagnostic{Name: "", Command: []string{"rel"}, Timeout: -1, MaxOutput: -1}, []string{"name:", "command[0]:", "timeout:", "max_output:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.d.Validate()
			if len(tc.keys) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate accepted an invalid diagnostic")
			}
			for _, k := range tc.keys {
				if !strings.Contains(err.Error(), k) {
					t.Errorf("error %q does not mention %q", err, k)
				}
			}
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var ce *configerr.Error
				if !errors.As(e, &ce) || !strings.HasPrefix(e.Error(), ce.Key+": ") {
					t.Errorf("problem %q is not a *configerr.Error naming its key", e)
				}
			}
		})
	}
}

func TestArgsStayInTheirElement(t *testing.T) {
	d := Diagnostic{Command: []string{"/bin/echo", "--path={param.p}", "{host}", "{id}", "{param.p}{param.p}"}}
	got := d.Args("web-01", "evt-1", map[string]string{"p": "a b;c"})
	want := []string{"/bin/echo", "--path=a b;c", "web-01", "evt-1", "a b;ca b;c"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("Args = %q, want %q", got, want)
	}
}

func run(t *testing.T, r *Runner, d Diagnostic, argv ...string) Result {
	t.Helper()
	if len(d.Command) == 0 {
		d.Command = argv
	}
	return r.Run(context.Background(), d, argv)
}

func TestRunOutcomes(t *testing.T) {
	r := &Runner{KillGrace: 200 * time.Millisecond}
	for _, tc := range []struct {
		name     string
		argv     []string
		timeout  time.Duration
		outcome  string
		exit     int
		contains string
	}{
		{"success", []string{"/bin/echo", "hello"}, time.Minute, outcome.Succeeded, 0, "hello"},
		{"exit code", []string{"/bin/sh", "-c", "echo oops >&2; exit 3"}, time.Minute, outcome.Failed, 3, "oops"},
		{"no shell interpretation", []string{"/bin/echo", "$(id); `id` && rm -rf /"}, time.Minute, outcome.Succeeded, 0, "$(id); `id` && rm -rf /"},
		{"missing binary", []string{"/nonexistent/diag"}, time.Minute, outcome.Failed, -1, ""},
		{"timeout", []string{"/bin/sleep", "30"}, 100 * time.Millisecond, outcome.TimedOut, -1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, r, Diagnostic{Timeout: tc.timeout}, tc.argv...)
			if res.Outcome != tc.outcome || res.ExitCode != tc.exit {
				t.Fatalf("outcome=%s exit=%d err=%v; want %s/%d", res.Outcome, res.ExitCode, res.Err, tc.outcome, tc.exit)
			}
			if !bytes.Contains(res.Output, []byte(tc.contains)) {
				t.Fatalf("output %q does not contain %q", res.Output, tc.contains)
			}
		})
	}
}

func TestMinimalEnvironment(t *testing.T) {
	t.Setenv("AUTODIAG_SECRET", "leak")
	res := run(t, &Runner{}, Diagnostic{}, "/usr/bin/env")
	if res.Outcome != outcome.Succeeded {
		t.Fatalf("env failed: %+v", res)
	}
	if bytes.Contains(res.Output, []byte("AUTODIAG_SECRET")) {
		t.Fatal("the agent's environment leaked into a diagnostic")
	}
	for _, want := range []string{"PATH=", RunIDVar + "="} {
		if !bytes.Contains(res.Output, []byte(want)) {
			t.Fatalf("no %s in %q", want, res.Output)
		}
	}
}

// TestEmptyInput: every run reads an empty standard input, read-only, runs
// at once sharing it.
func TestEmptyInput(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			res := run(t, &Runner{}, Diagnostic{Timeout: 10 * time.Second},
				"/bin/sh", "-c", `n=$(cat | wc -c); echo "read $n"; echo x 2>/dev/null >&0 || echo "read-only"`)
			if res.Outcome != outcome.Succeeded || strings.Join(strings.Fields(string(res.Output)), " ") != "read 0 read-only" {
				t.Errorf("run reading its input: %s %q", res.Outcome, res.Output)
			}
		})
	}
	wg.Wait()
}

func TestOutputCap(t *testing.T) {
	// 1 MiB of output against a 1 KiB cap: the process must not block on a
	// full pipe, and the result is cut and marked.
	res := run(t, &Runner{}, Diagnostic{MaxOutput: 1024}, "/bin/sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' x; echo done")
	if res.Outcome != outcome.Succeeded {
		t.Fatalf("outcome %s err %v", res.Outcome, res.Err)
	}
	if !res.Truncated {
		t.Fatal("not marked truncated")
	}
	if want := 1024 + len(TruncationMark); len(res.Output) != want {
		t.Fatalf("len(output) = %d, want %d", len(res.Output), want)
	}
	if !bytes.HasSuffix(res.Output, []byte(TruncationMark)) {
		t.Fatal("truncation mark missing")
	}
	small := run(t, &Runner{}, Diagnostic{MaxOutput: 1024}, "/bin/echo", "short")
	if small.Truncated || string(small.Output) != "short\n" {
		t.Fatalf("small output = %q truncated=%v", small.Output, small.Truncated)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// waitGone waits for pid to disappear; a process killed by SIGKILL is gone
// once its parent (init, for an orphan) reaps it.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d survived its task", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("child never wrote its pid")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pidWritten returns the pid in path once a whole line is there.
func pidWritten(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(string(b), "\n") {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil
}

// setupTimeouts are the diagnostic timeouts, in turn, of a test whose
// script must set its scene up (fork, exec, write a pid) before the timeout
// ends the run. The first keeps the test fast; each next one is for a
// machine too loaded to fork and exec a few processes within the one
// before, and the last is far beyond what that takes anywhere.
var setupTimeouts = []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond, 4800 * time.Millisecond}

// withSetupTimeout runs attempt with each of setupTimeouts until it
// reports that its script's scene was set up before the timeout, and
// fails t if not even the longest sufficed. attempt asserts only on a
// run whose scene was set up.
func withSetupTimeout(t *testing.T, attempt func(t *testing.T, timeout time.Duration) (setUp bool)) {
	t.Helper()
	for _, timeout := range setupTimeouts {
		if attempt(t, timeout) {
			return
		}
		t.Logf("the script was not set up within the %v timeout (a loaded machine); trying a longer one", timeout)
	}
	t.Fatalf("the script was not set up within %v", setupTimeouts[len(setupTimeouts)-1])
}

func TestTimeoutKillsWholeProcessGroup(t *testing.T) {
	withSetupTimeout(t, func(t *testing.T, timeout time.Duration) bool {
		pidFile := filepath.Join(t.TempDir(), "pid")
		// The grandchild ignores SIGTERM, so only the group SIGKILL ends it.
		script := `(trap '' TERM; exec sleep 300) & echo $! > ` + pidFile + `; wait`
		res := run(t, &Runner{KillGrace: 100 * time.Millisecond}, Diagnostic{Timeout: timeout}, "/bin/sh", "-c", script)
		if res.Outcome != outcome.TimedOut {
			t.Fatalf("outcome = %s", res.Outcome)
		}
		// The leader wrote the pid, or the timeout ended it first; it is
		// gone now, so the file is final.
		pid, ok := pidWritten(pidFile)
		if ok {
			waitGone(t, pid)
		}
		return ok
	})
}

func TestBackgroundChildDoesNotOutliveSuccess(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := `sleep 300 & echo $! > ` + pidFile + `; echo started`
	res := run(t, &Runner{}, Diagnostic{Timeout: time.Minute}, "/bin/sh", "-c", script)
	if res.Outcome != outcome.Succeeded || !bytes.Contains(res.Output, []byte("started")) {
		t.Fatalf("outcome = %s output %q", res.Outcome, res.Output)
	}
	waitGone(t, readPID(t, pidFile))
}

func TestCancelKillsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result, 1)
	go func() {
		done <- (&Runner{KillGrace: 100 * time.Millisecond}).Run(ctx, Diagnostic{Timeout: time.Hour}, []string{"/bin/sh", "-c", "sleep 300 & echo $! > " + pidFile + "; wait"})
	}()
	pid := readPID(t, pidFile)
	cancel()
	res := <-done
	if res.Outcome != Cancelled {
		t.Fatalf("outcome = %s", res.Outcome)
	}
	waitGone(t, pid)
	if res.Err != nil && !errors.Is(res.Err, context.Canceled) && !strings.Contains(res.Err.Error(), "killed") {
		t.Logf("err: %v", res.Err)
	}
}

// capRun is a diagnostic writing 16 times its 1 MiB output cap.
var capRun = struct {
	d    Diagnostic
	argv []string
}{Diagnostic{MaxOutput: 1 << 20, Timeout: time.Minute}, []string{"/bin/sh", "-c", "yes | head -c 16777216"}}

func TestOutputMemoryStaysNearCap(t *testing.T) {
	r := &Runner{}
	run(t, r, Diagnostic{}, "/bin/true") // one-time setup out of the measurement
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := r.Run(context.Background(), capRun.d, capRun.argv)
	runtime.ReadMemStats(&after)
	if res.Outcome != outcome.Succeeded || !res.Truncated || len(res.Output) != int(capRun.d.MaxOutput)+len(TruncationMark) {
		t.Fatalf("outcome %s truncated %v len %d err %v", res.Outcome, res.Truncated, len(res.Output), res.Err)
	}
	// The buffer doubles up to the cap plus the mark (at most twice that in
	// all), one discard chunk drains the rest; everything else a run
	// allocates (exec, the /proc sweep) gets half the cap.
	limit := uint64(capRun.d.MaxOutput)
	bound := 2*(limit+uint64(len(TruncationMark))) + discardChunk + limit/2
	if got := after.TotalAlloc - before.TotalAlloc; got > bound {
		t.Fatalf("a run allocated %d bytes, want at most %d for a %d-byte cap", got, bound, limit)
	} else {
		t.Logf("a run allocated %d bytes (bound %d)", got, bound)
	}
}

// BenchmarkRunCappedOutput reports what one run writing 16 MiB against a
// 1 MiB cap allocates (B/op).
func BenchmarkRunCappedOutput(b *testing.B) {
	r := &Runner{}
	b.ReportAllocs()
	for b.Loop() {
		if res := r.Run(context.Background(), capRun.d, capRun.argv); res.Outcome != outcome.Succeeded {
			b.Fatalf("outcome %s err %v", res.Outcome, res.Err)
		}
	}
}
