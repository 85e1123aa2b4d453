// Package harness starts autodiag as the operator does, a child process
// with a config file, against the project's fakes on loopback, and watches
// it from outside: its JSON log lines, its admin API and metrics, what the
// fakes and Redis saw. The end-to-end tests in cmd/autodiag, the chaos lab
// (scripts/chaos) and the fleet simulation (scripts/fleet) all start their
// processes through it, so that a run of one means what a run of another
// means.
//
// It owns the start-up and the tear-down: building the binary once
// (Build), a child in its own process group that is killed with its
// diagnostics (Process), an agent and its log (Agent), a redis-server of
// its own (Redis) or a Redis Cluster (RedisCluster), the SQS and Auto Scaling fakes served over HTTP (SQS,
// Serve), toxiproxy-server (Toxiproxy), the ledger that diagnostics write
// their runs to (Ledger), an agent's YAML (AgentConfig), waiting on an
// observable condition (Until), and a Lab that stops everything a program
// started. Nothing here imports testing: a test wraps a call in t.Fatal,
// a lab program prints the error.
//
// It may import the fakes (internal/fake/...) and the agent's state
// package (to read task records); it may not import cmd or the agent's
// wiring: it sees the agent only as a process.
package harness
