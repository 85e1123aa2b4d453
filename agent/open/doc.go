// Package open holds the agent's per-resource openers, each returning
// what it built and, where there is one, its closer: the AWS SDK
// configuration (AWS), the instance id (InstanceID, ResolveInstanceID),
// Redis (Redis: the client with its connection bound, its URL from a
// secret, its connection metrics), the secret store (Secrets) and the
// tracer provider (Tracing). agent.Open composes them; CLI commands that
// reach the same resources as the agent use them too.
//
// Here: aws.go (the SDK configuration, the instance id and hostname),
// redis.go (the client, its logger and I/O bound, the URL secret, the
// fleet's origin key), redisconns.go (the dial counter and INFO clients),
// secrets.go (the secret store at start), tracing.go (the tracer
// provider) and listener.go (the standalone alert listener of `autodiag
// intake`, with the fleet's stores it records into).
package open
