// Package agent is the composition root of `autodiag run`: Open builds
// the outside clients from one config.Config (through agent/open), New builds the parts in one
// pass over it, Run starts them, waits for the drain to end and stops
// them, and Handler serves the admin API. The parts live in their own
// packages and take what they need as narrow interfaces:
//
//   - config: the configuration, Load and Validate;
//   - hooks: redaction, the S3 upload, notifications, reports (built
//     first: the worker and the supervisor both take them);
//   - worker: receive → validate → route → claim → decide → run →
//     record → finish → ack, and each task's outcome;
//   - launch: the launch gate before intake;
//   - supervisor: the drain, from trigger to Ending;
//   - admin: the admin API (Handler);
//   - cwpublish: the CloudWatch metrics (DrainSeconds, LimiterDegraded);
//   - open: the per-resource openers (AWS, Redis, secrets, tracing);
//   - alert/listener: the alert listener (the HTTP one alerting systems
//     post to, `intake:`) and its standalone form, `autodiag intake`.
//
// Here: agent.go (New, Run), wire.go (Open: the resources through the
// openers of agent/open, then the queue, state, limiter and lifecycle),
// placement.go (the instance's group and zone for max_percent caps),
// parts.go and supervise.go (building the parts), handoff.go (lifecycle
// notices between agents), hostnames.go (the names this agent answers
// for), instance.go (the instance record and redis_up), metrics.go and
// slackwire.go (Slack's Approve and Deny buttons deciding through the
// approvals store). See docs/design.md for the two flows with the file of
// each step.
package agent
