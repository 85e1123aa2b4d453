// Package limiter decides whether policy allows a diagnostic task to run.
//
// Rules are evaluated first-match in file order; each rule combines a daily
// quota (calendar day of an operational time zone), a minimum interval, a
// sliding window, a leaky bucket with burst and a sticky block. One decision
// is one atomic round trip to Redis (a single EVALSHA of an embedded Lua
// script) or one critical section of the in-memory backend, which has the
// same semantics for a single agent.
//
// The package imports no other autodiag package.
package limiter
