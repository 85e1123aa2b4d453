// Package lifecycle turns EC2 Auto Scaling lifecycle actions and spot
// interruption notices into drain triggers, and keeps the lifecycle action
// alive (RecordLifecycleActionHeartbeat) until the drain ends, then completes
// it (CompleteLifecycleAction) exactly once.
//
// It is the only package that imports service/autoscaling.
package lifecycle
