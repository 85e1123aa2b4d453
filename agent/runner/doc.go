// Package runner executes catalog diagnostics: argv only (never a shell),
// placeholders substituted from already-validated values, each run in its
// own process group with a timeout, a minimal environment and bounded
// output.
//
// # No process outlives its run
//
// A timeout or cancellation signals the run's process group with SIGTERM,
// then SIGKILL after Runner.KillGrace. A process group is not enough: a
// descendant that calls setsid (or double-forks into another group) would
// keep running under pid 1 and, holding the output pipe, keep the run
// waiting for end of file. So the runner also:
//
//   - stops reading output at the diagnostic's timeout (a read deadline on
//     the pipe), whoever holds the write end;
//   - makes the agent process a child subreaper (PR_SET_CHILD_SUBREAPER, set
//     once, at the first run), so every orphan of a diagnostic is reparented
//     to the agent instead of pid 1 and stays in the agent's process tree;
//   - marks each run's environment with RunIDVar set to a random id, which
//     every descendant inherits through fork, exec and setsid;
//   - when the run's leader has exited, kills every process below the agent
//     that carries the run's id (or, where its environment cannot be read,
//     descends from one that does) and reaps those reparented to the agent,
//     before Run returns. Another run's processes carry another id and are
//     left alone.
//
// The subreaper was chosen over a cgroup per run because it works wherever
// the agent runs: unprivileged, without Delegate=yes in the unit (whose
// ProtectControlGroups=yes keeps /sys/fs/cgroup read-only), on a laptop, in
// a container and inside the test process. It confines every kill to the
// agent's own subtree, and a pid below the agent cannot be reused until the
// agent reaps it.
//
// Dead orphans reparented to the agent are reaped by pid, at the end of
// every run; never with wait4(-1), which would steal exit statuses from
// os/exec. A zombie child of the agent counts as an orphan only if it is
// not a leader the runner started (start and registration happen under one
// lock that sweeps also take) and is outside the agent's own process group,
// which children started elsewhere in the agent stay in unless they ask
// otherwise.
//
// The exception: a descendant that replaces its whole environment (env -i)
// and whose parent has exited before the run ends carries no id and cannot
// be attributed; it is left running. Its output, if it holds the pipe,
// still stops being read at the timeout, and the run is then timed_out.
// Where PR_SET_CHILD_SUBREAPER fails, orphans go to pid 1, the runner
// searches every process for the id, and Result.Err says so.
//
// # Memory
//
// Output is read in place into a buffer that grows by doubling up to
// max_output plus room for TruncationMark; past the cap the pipe is drained
// through one fixed chunk and the rest discarded, so the diagnostic runs to
// its own end (its exit code stays meaningful) while the agent holds at most
// about twice max_output for it.
package runner
