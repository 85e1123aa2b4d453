// Package agent is the program `autodiag run` executes. Each role is a
// type in a file of its name, wired together by Agent (agent.go):
//
//   - the launch gate (launch.go) holds intake until the readiness checks
//     pass and the launch hook is completed, and while the instance sits in
//     a warm pool;
//   - intake (intake.go) receives messages while there are free slots;
//   - pipeline (pipeline.go) takes each one through validate → claim →
//     decide → run → record;
//   - outcomeRecorder (outcome.go) is the one place a task's outcome is
//     written: log line, metric, audit entry;
//   - supervisor (supervisor.go) owns the drain: action discovery,
//     persistence, lifecycle heartbeats and the completion;
//   - presence (instance.go) keeps the instance record and redis_up fresh;
//   - publisher (cloudwatch.go) puts DrainSeconds and LimiterDegraded;
//   - admin.go serves the admin HTTP API.
package agent
