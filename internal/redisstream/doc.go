// Package redisstream holds what every durable queue of autodiag built on
// a Redis stream read by a consumer group needs alike: creating the group
// (and the stream) where it may already exist, and recognising the error
// that says the group is gone (Redis restarted empty, or the key was
// removed) so that the caller creates it again. The notification outbox
// (agent/notify) and the report jobs (agent/report) use it.
package redisstream
