// Package lifecycle turns EC2 Auto Scaling lifecycle actions, spot
// interruption notices, rebalance recommendations and scheduled events into
// drain triggers, gates the launch lifecycle action on the agent's
// readiness, tells the agent when the instance sits in a warm pool, and
// keeps the terminating lifecycle action alive
// (RecordLifecycleActionHeartbeat) until the drain ends, then completes it
// (CompleteLifecycleAction) exactly once.
//
// It is the only package that imports service/autoscaling. It does not drain
// anything itself (that is package drain) and does not handle signals (the
// agent does): it reports triggers and acts on lifecycle actions.
//
// # Sources
//
// Config.Sources selects them (lifecycle.sources, README "Configuration"):
//
//   - signal: always on; the agent handles SIGTERM/SIGINT and calls
//     Watcher.Probe to learn whether a lifecycle action is waiting (IMDS
//     target-lifecycle-state already Terminated).
//   - imds: Watcher.Run polls autoscaling/target-lifecycle-state every
//     imds_poll_interval, with IMDSv2 tokens (the SDK's imds client), and
//     the notices drain_on lists: spot/instance-action,
//     events/recommendations/rebalance, events/maintenance/scheduled
//     (unlisted ones are not read). 404 and InService are normal answers.
//     Terminated (or Warmed:Terminated, leaving a warm pool) means
//     Terminating:Wait has begun: the trigger carries an Action for
//     hook_name, completed by InstanceId (IMDS has no token); the group is
//     asg_name or found with DescribeAutoScalingInstances. A spot notice
//     triggers with a hard Deadline (interruption time − SpotSafetyMargin) and
//     the ASG action if one is already waiting (else Action is nil; the agent
//     may Probe again before completing). A rebalance recommendation
//     triggers at once (source "rebalance"), an active instance-stop,
//     instance-retirement, system-reboot, instance-reboot or
//     system-maintenance event scheduled_event_lead before its NotBefore
//     (source "maintenance", Deadline NotBefore − SpotSafetyMargin while
//     ahead); neither has an Action.
//     The state read is kept for the agent: State, Warmed, StateChanged and
//     WaitInService tell it when the instance sits in a warm pool (Warmed:*),
//     where it takes no work, and when it leaves it.
//   - sqs: Watcher.Run long-polls queue_url for ASG lifecycle notifications,
//     in the direct Auto Scaling JSON, the same wrapped by SNS, or the
//     EventBridge "EC2 Instance-terminate Lifecycle Action" event.
//     autoscaling:TEST_NOTIFICATION is deleted. Notifications for other
//     instances (or other hooks, when hook_name is set) are made visible again
//     at once (ChangeMessageVisibility 0) and never deleted. Ours is kept
//     invisible while draining (at the trigger, then by every Heartbeat) and
//     deleted by Complete only after the completion succeeded. Malformed
//     messages are logged, hidden for malformedVisibility and left to the
//     queue's redrive policy. A
//     notification of another instance whose action's heartbeat timeout has
//     passed since it was sent, and that no agent claims (Deps.Claimed), is
//     deleted (autodiag_lifecycle_orphaned_notifications_total{transition});
//     so is this instance's own launching notification of
//     launch_hook_name. With Deps.Handoff (the agent's Redis), a
//     terminating notice of our hook for another instance is handed to that
//     instance's agent (Handoff.Give, kept for the hook's heartbeat timeout)
//     and then deleted, so it is received once instead of cycling through
//     the fleet; each watcher reads the notices handed to its own instance
//     (Handoff.Take, a blocking read of handoffBlock) beside its poll, and
//     Actor.Complete forgets them. Give failing, or no live agent for the
//     instance, leaves the notice to the path above
//     (autodiag_lifecycle_handoffs_total{result}). A poll in progress when Run stops gets
//     NotificationReceiveGrace, so an answer already on the wire is taken;
//     a poll hides what it receives for receiveVisibility (1 s), not the
//     queue's visibility timeout, so a notice in an answer nobody reads
//     (a poll aborted after the grace, a process killed) is soon back.
//
// Run calls fire once, for the first trigger, after every source has been
// told to stop: no ReceiveMessage starts after a trigger. Polling errors are
// logged, counted (autodiag_lifecycle_source_errors_total{source}) and retried
// with backoff; they never end Run.
//
// # Heartbeats and completion
//
// Actor.Heartbeat sends a heartbeat at once, then every heartbeat_interval,
// until its context is cancelled: the agent cancels it exactly when the drain
// ends. A failed heartbeat is retried with backoff until the next one is due.
// Heartbeats stop on "No active Lifecycle Action found" and at the action's
// global timeout, min(48h, 100 × hook_heartbeat_timeout) from Action.Started.
// Without hook_heartbeat_timeout, Heartbeat asks DescribeLifecycleHooks once
// (best effort) and, if heartbeat_interval is not below half of the hook's
// timeout, beats every third of it instead (logged as a warning) rather than
// let the action expire.
//
// "No active Lifecycle Action found" is not believed at once for an action
// known only from IMDS (no token): within NoActionSettle of Action.Started
// the heartbeat or completion is retried for up to NoActionSettle, since
// the API can lag instance metadata.
//
// Actor.Complete calls CompleteLifecycleAction until one call succeeds
// (CONTINUE, or ABANDON from Config.CompletionResult when on_timeout is
// abandon and the drain hit its deadline), retrying throttling, 5xx and
// transport errors with backoff on the caller's detached, bounded context
// (DefaultCompleteTimeout when it has no deadline). "No active Lifecycle
// Action found" counts as done: the action ended already (completed by an
// earlier attempt whose response was lost, or timed out). Later calls for the
// same action return nil without calling Auto Scaling.
//
// Metrics (registered on Deps.Registerer): autodiag_lifecycle_heartbeats_total
// and autodiag_lifecycle_completions_total, {result} = ok, throttled, error,
// no_action, one count per attempt.
//
// # Launch
//
// Actor.LaunchGate holds the EC2_INSTANCE_LAUNCHING action of
// launch_hook_name until the agent's readiness checks (a ReadinessFunc the
// agent passes) all pass, re-checking every LaunchRecheck and heartbeating
// meanwhile, then completes it by instance id with CONTINUE, or with
// ABANDON at launch_timeout, exactly once per destination (WarmPool, then
// AutoScalingGroup when the instance leaves the pool). LaunchStatus shows
// the checks for /v1/status. GateIntake is the whole start-up sequence for
// the agent: launch gate, wait while warmed, second launch gate; it returns
// when intake may start.
//
// An instance in service sent back to its warm pool (scale-in with instance
// reuse: InService, then Warmed:*) has its terminating hooks run: the imds
// source triggers with the hook_name action as for Terminated.
//
// # Restart mid-drain
//
// Action is plain JSON (json.Marshal): the agent persists it with the drain
// state and, after a restart, calls Heartbeat and Complete with it again.
//
// # Timeouts that must nest
//
// Config.Validate refuses heartbeat_interval ≥ hook_heartbeat_timeout/2 and
// drain_timeout ≥ the action's global timeout. The hook's own timeout is
// Auto Scaling configuration: set hook_heartbeat_timeout to it so these
// checks can run.
//
// # Operating notes
//
//   - IAM: autoscaling:RecordLifecycleActionHeartbeat,
//     autoscaling:CompleteLifecycleAction,
//     autoscaling:DescribeAutoScalingInstances (unless asg_name is set),
//     for the launch hook the same two calls on its group,
//     optionally autoscaling:DescribeLifecycleHooks (see above); for
//     the sqs source sqs:ReceiveMessage, sqs:DeleteMessage,
//     sqs:ChangeMessageVisibility on queue_url.
//   - Without Deps.Handoff (or while it fails), a queue shared by the fleet
//     delivers every notification to every agent until its owner takes it: a
//     redrive policy's maxReceiveCount must be well above the fleet size, or
//     notices move to the dead-letter queue before their instance sees them.
//     With it, a notice whose instance's agent is live is received once.
//
// Package asgfake is an Auto Scaling fake for tests of this package and of
// the agent.
package lifecycle
