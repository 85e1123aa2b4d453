// Package statetest is the conformance suite every state.Store backend must
// pass, so Memory (embedded mode) and Redis (a fleet) keep the same
// semantics: claims, lease renewal and expiry, attempts that survive a
// crashed agent, finish, release, recovery after a restart, the capped audit
// stream, instance TTLs and persisted drain state. Time is driven by a
// clock.Manual handed to the backend, so lease expiry needs no waiting.
package statetest
