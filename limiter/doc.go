// Package limiter decides whether policy allows a diagnostic task to run.
//
// Rules are evaluated first-match in configuration order; a rule matches on
// diagnostic names, a host regexp and severities, and counts per host,
// diagnostic, host+diagnostic or globally. Its limits, in any combination:
// a daily quota (calendar day of an operational time zone, reset at local
// midnight, 23 h and 25 h days included), a minimum interval, a sliding window
// (sorted set), a leaky bucket (GCRA) with a burst multiplier, a
// concurrency cap, and a sticky block after any denial. An alert event seen
// within the dedupe TTL is a duplicate: not a denial, it consumes nothing. A
// task no rule matches is allowed under rule "none". A decision consumes
// quota only when every limit of the rule allows it.
//
// # Runs: concurrency slots and failure breakers
//
// A rule's `concurrency: N` lets N allowed tasks of its key run at once,
// fleet-wide. The slot is taken in the decision, atomically with the rule's
// other limits, under Request.TaskID until Request.Lease from now (the
// task's execution lease); Renew extends it with the lease, Done gives it
// back when the run ends, and an agent that dies frees it when its lease
// ends, never later. A denial's RetryAfter is the earliest lease expiry
// among the holders, at least 1 s, and it defers unless the rule sets
// on_exceed. The same task id asking again keeps its one slot (a
// redelivered task).
//
// `concurrency: {max_percent: P, per: fleet|asg|az}` caps the runs at
// max(1, floor(P % of the agents in service)), recounted at every decision:
// the agents are the members of the in-service sorted set
// (InServiceKey, written by the agents' instance registry) whose heartbeat
// expiry score is after now, so an agent that stops heartbeating stops
// counting within its heartbeat TTL. per asg or az counts the runs (a slot
// set of their own) and the agents of the deciding agent's group or zone
// (Options.ASG, Options.AZ). A denial has reason concurrency_percent and
// Counters.Running, ConcurrencyLimit, AgentsInService and MaxPercent. On a
// single server allow.lua reads the count in the decision's one EVALSHA;
// on a Cluster or Ring the set is in another slot, so the count is one
// ZCOUNT before it.
//
// A rule's `breaker: {failures, window, open_for}` counts the runs it
// allowed that end failed or timed_out (Done's outcome) for the rule's key:
// the failures-th within window opens it, and the rule denies with reason
// "failing" for open_for. Then exactly one run, fleet-wide, is let through
// as the probe (Decision.Probe); its success closes the breaker, its
// failure reopens it, and a probe whose lease lapses without a Done is
// replaced by the next allowed task. Failures of other runs while it is open
// count for nothing. This breaker is the rule's; the Redis-outage breaker
// (reason "breaker_open", below) is the limiter's own.
//
// # Shadow rules
//
// A rule with `shadow: true` never denies. First-match applies among the
// enforced rules only; every matching shadow is evaluated in the same
// decision, with its state kept as if it were enforced: it consumes (a
// quota, a slot, a probe) when it allows and the task runs, and a would-be
// denial sets its block. A would-be denial is logged, counted as
// decision="shadow_denied" under the shadow's name and reason, and reported
// in Decision.Shadow.
//
// # Backends
//
// NewRedis: one decision is ONE EVALSHA of the embedded allow.lua (EVAL once
// after a SCRIPT FLUSH), so a fleet of agents sharing Redis is exact; the
// enforced rule and every matching shadow are evaluated in that one call.
// Every key of a rule carries the hash tag {<limited key value>} ({global}
// for key: global), and the dedupe key is put under the enforced rule's tag,
// so a decision runs unchanged on Redis Cluster. There (a ClusterClient or
// Ring), a shadow whose key kind differs from the enforced rule's is in
// another slot and costs one more EVALSHA, after the first, each (Explain
// states the count). Done and Renew are one EVALSHA of held.lua per slot
// likewise. A caller with its own script calls on the same server can
// carry both instead: Fold prepares a decision for the caller's script to
// run (allow.lua's source, keys and args; Resolve reads its reply as
// Allow would), DoneCalls gives Done's calls to send in the caller's
// pipeline. The agent runs the decision inside its claim's script and
// the release in its finish's round trip. Keys (prefix is redis.prefix):
//
//	<prefix>lim:{tag}:s:<rule>                    state of the rule for the key, TTL = its longest-lived part
//	<prefix>lim:{tag}:w:<rule>                    window ZSET, only for a window count above 64, TTL = per
//	<prefix>lim:{tag}:c:<rule>                    concurrency slots: ZSET task id -> lease expiry, TTL = the latest
//	<prefix>lim:{tag}:f:<rule>                    failure breaker: HASH open-until, probe, probe lease, failure times
//	<prefix>lim:{tag}:dd:<host>:<diagnostic>:<id>  dedupe mark, TTL = dedupe.ttl
//
// The state is one packed string (layout at the top of allow.lua): block
// until, local day (YYYYMMDD) and that day's count, last allowed run, bucket
// theoretical arrival time, then the sliding window as an exact log of the
// allowed runs still inside it (ascending, never more than the window's
// count). A decision is therefore one GET (MGET with the dedupe mark) and at
// most one SET, whatever limits the rule combines. The log is copied on
// every decision, so a window with a count above 64 is a sorted set of its
// own instead (scored by time, members unique per decision, trimmed each
// call, never more than count members): about 5 µs more per decision on
// Redis, but not growing with the count. Its TTL is the longest
// any part needs: the block, the next local midnight while the day's count
// is above 0, the last run plus min_interval, the newest window entry plus
// per, the bucket's drain time. A count stored for another day reads as 0,
// so the daily quota resets at local midnight (23 h and 25 h days included)
// however long the key lives.
//
// The rule name is part of the state key so that two rules never share a
// counter. The dedupe identity is (host, diagnostic, event id): one alert
// fanned out to two diagnostics is not a duplicate. Only an allowed decision
// marks the event, so a task deferred after a denial is not a duplicate
// when it comes back.
//
// The call is go-redis's Script.Run on the client as given; a client that
// batches (client.AutoPipeline()) batches decisions too, each still one
// EVALSHA, atomic on its own.
//
// NewMemory keeps the same state in process (embedded mode, one agent). The
// conformance suite runs the same cases against both backends.
//
// # Time and clock skew
//
// Time comes from the injected Clock and is passed to the script as ARGV
// (Unix microseconds); the script never calls TIME. Expiry decisions compare
// stored times with that ARGV time, key TTLs only collect garbage. This makes
// simulated time testable and the Lua deterministic, at a price: agents
// share state but not clocks. If one agent's clock runs ahead by s, its
// allowed runs look s later to the others: a min_interval or window can
// appear up to s longer or shorter, a block set by it lasts s longer or
// shorter for the others, a daily quota can switch days up to s early or
// late around midnight, and a concurrency slot or breaker probe it takes
// lasts up to s longer or shorter. Keep fleet clocks NTP-synchronised (EC2 provides
// chrony with the Amazon Time Sync Service); skew well below a second is
// negligible against limits of minutes and hours. The alternative, Redis
// TIME, would make every decision depend on one clock but could not be
// simulated in tests and would not know the operational time zone's
// calendar, which is computed in Go.
//
// # Failure
//
// Each backend call is bounded by Options.Timeout (redis.timeout) by the
// limiter itself, whatever the client's options. With a *redis.Client,
// ClusterClient or Ring built with ContextTimeoutEnabled, the call runs on
// the caller's goroutine with that deadline, which the client applies to
// dial, read and write and to a wait for a pooled connection; a read it
// cuts costs the connection (go-redis closes it: the reply could still
// come). With any other client (go-redis applies a context deadline only
// to the wait for a connection without ContextTimeoutEnabled, and an
// AutoPipeliner queues the call) it runs on a goroutine of its own and the
// decision stops waiting at the timeout; the call goes on to read its
// reply within the client's ReadTimeout and gives its connection back to
// the pool. The agent's client is of that kind, with ReadTimeout ten times
// redis.timeout and a small pool, so that a slow Redis is not also made to
// accept a new connection for every decision that ran out of time. On an error
// or timeout Allow decides by the rule's fail mode (open: allowed; closed:
// denied with RetryAfter = the breaker cooldown), marks the decision
// Degraded, logs the cause and counts autodiag_limiter_degraded_total.
// A degraded decision takes no slot and no probe and evaluates no shadow:
// a rule whose concurrency cap must hold through a Redis outage needs
// fail: closed. After BreakerThreshold consecutive failures a circuit breaker stops
// calling Redis for BreakerCooldown (on the Clock), deciding by fail mode at
// once (reason "breaker_open"), then lets one probe through. Check, the dry
// run behind `autodiag limits check`, and Inspect (the slots' holders and
// the breakers' state of a request's rules) return the error instead; so do
// Done and Renew, which bypass that breaker (a slot they fail to give back
// lapses with its lease).
//
// # Observability
//
// autodiag_limiter_decisions_total{rule,decision,reason} counts every Allow
// (decision: allowed, denied, duplicate; reason: the Reason* constants) and
// every shadow rule's would-be denial (decision: shadow_denied), and
// autodiag_limiter_degraded_total the fail-mode decisions. Every denial and
// degraded decision is logged with host, rule, limit, reason, counters,
// retry_after, degraded and the Redis state (up, failing, breaker_open), so an
// operator can tell "not eligible" (no rule / duplicate), "rate limited",
// "error" (degraded) and "executed" apart.
//
// Explain normalises the rules for `autodiag limits explain` (String,
// WriteExplain). The package imports no other autodiag package but the shared
// leaves internal/configerr and internal/outcome.
package limiter
