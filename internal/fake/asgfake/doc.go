// Package asgfake is an in-memory EC2 Auto Scaling service speaking the
// Query protocol (POST form Action=...&Version=2011-01-01, XML responses,
// ErrorResponse errors) exactly as aws-sdk-go-v2/service/autoscaling sends
// and parses it, so the real SDK client can be pointed at it
// (BaseEndpoint or AWS_ENDPOINT_URL_AUTO_SCALING).
//
// It models what the lifecycle package relies on: groups, instances,
// lifecycle hooks and lifecycle actions with their rules. An instance put
// into Terminating:Wait gets one action (with a token) per terminating
// hook; an instance launched (Launch) waits in Pending:Wait, or
// Warmed:Pending:Wait when its destination is the warm pool, with one
// action per launching hook, and leaving the warm pool (LeaveWarmPool)
// runs the launching hooks again; each action carries Origin and
// Destination (EC2, AutoScalingGroup, WarmPool) as the notices do. An
// abandoned launch terminates the instance; a continued one moves it on
// (InService, or the pool's state from SetWarmPool).
// RecordLifecycleActionHeartbeat resets the heartbeat timeout; the
// heartbeat timeout or the global timeout (min(48h, 100 × HeartbeatTimeout))
// ends the action with the hook's DefaultResult; a completion or heartbeat
// on an ended action, or with an unknown token, gets the ValidationError
// "No active Lifecycle Action found ...". Time comes from an injected clock
// and expiry is evaluated on every request, so a test expires an action by
// moving its clock, without sleeping. Options.VisibleAfter hides new
// actions from the API for a while, as the real one can lag instance
// metadata.
//
// Every call is recorded with its time, parameters and result; faults
// (Throttling, 5xx) can be injected by count or by seeded probability,
// before or after the operation takes effect (a lost response).
//
// Operations: RecordLifecycleActionHeartbeat, CompleteLifecycleAction,
// DescribeAutoScalingInstances, DescribeLifecycleHooks, PutLifecycleHook,
// TerminateInstanceInAutoScalingGroup. Groups and instances are set up with
// Go helpers (AddGroup, AddInstance, PutHook, SetWarmPool, Launch,
// LeaveWarmPool, Terminate).
package asgfake
