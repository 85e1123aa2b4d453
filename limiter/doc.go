// Package limiter decides whether policy allows a diagnostic task to run.
//
// Rules are evaluated first-match in configuration order; a rule matches on
// diagnostic names, a host regexp and severities, and counts per host,
// diagnostic, host+diagnostic or globally. Its limits, in any combination:
// a daily quota (calendar day of an operational time zone, reset at local
// midnight, 23 h and 25 h days included), a minimum interval, a sliding window
// (sorted set), a leaky bucket (GCRA) with a burst multiplier, and a sticky
// block after any denial. An alert event seen within the dedupe TTL is a
// duplicate: not a denial, it consumes nothing. A task no rule matches is
// allowed under rule "none". A decision consumes quota only when every limit
// of the rule allows it.
//
// # Backends
//
// NewRedis: one decision is ONE EVALSHA of the embedded allow.lua (EVAL once
// after a SCRIPT FLUSH), so a fleet of agents sharing Redis is exact. Every
// key of a decision carries the same hash tag, {<limited key value>} ({global}
// for key: global), so it runs unchanged on Redis Cluster; the dedupe key is
// put under the rule's tag for that reason. Keys (prefix is redis.prefix):
//
//	<prefix>lim:{tag}:s:<rule>                    state of the rule for the key, TTL = its longest-lived part
//	<prefix>lim:{tag}:w:<rule>                    window ZSET, only for a window count above 64, TTL = per
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
// shorter for the others, and a daily quota can switch days up to s early or
// late around midnight. Keep fleet clocks NTP-synchronised (EC2 provides
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
// ClusterClient or Ring built with ContextTimeoutEnabled (the agent's), the
// call runs on the caller's goroutine with that deadline, which the client
// applies to dial, read and write and to a wait for a pooled connection.
// With any other client (go-redis ignores context deadlines without
// ContextTimeoutEnabled, and an AutoPipeliner queues the call) it runs on a
// goroutine of its own and the decision stops waiting at the timeout; the
// abandoned call ends with the client's own timeouts, so set
// ReadTimeout/WriteTimeout/PoolTimeout near redis.timeout there. On an error
// or timeout Allow decides by the rule's fail mode (open: allowed; closed:
// denied with RetryAfter = the breaker cooldown), marks the decision
// Degraded, logs the cause and counts autodiag_limiter_degraded_total.
// After BreakerThreshold consecutive failures a circuit breaker stops
// calling Redis for BreakerCooldown (on the Clock), deciding by fail mode at
// once (reason "breaker_open"), then lets one probe through. Check, the dry
// run behind `autodiag limits check`, returns the error instead.
//
// # Observability
//
// autodiag_limiter_decisions_total{rule,decision,reason} counts every Allow
// (decision: allowed, denied, duplicate; reason: the Reason* constants), and
// autodiag_limiter_degraded_total the fail-mode decisions. Every denial and
// degraded decision is logged with host, rule, limit, reason, counters,
// retry_after, degraded and the Redis state (up, failing, breaker_open), so an
// operator can tell "not eligible" (no rule / duplicate), "rate limited",
// "error" (degraded) and "executed" apart.
//
// Explain normalises the rules for `autodiag limits explain` (String,
// WriteExplain). The package imports no other autodiag package.
package limiter
