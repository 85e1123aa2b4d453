// Package streamq is the work queue every durable queue of autodiag is
// built on: a Redis stream read by one consumer group, whose entries are
// claimed by one consumer, taken over from a holder that went quiet,
// retried when due, removed once done, and shed to a dead stream past a
// cap. It owns those stream mechanics and nothing else: what an entry
// holds, where the dead ones are listed and what an attempt means belong
// to its callers, the notification outbox (agent/notify, one queue per
// sink) and the report jobs (agent/report).
//
// It imports only go-redis; it may not import any other autodiag package.
package streamq
