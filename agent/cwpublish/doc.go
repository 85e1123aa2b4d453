// Package cwpublish puts the agent's two CloudWatch metrics (README
// "CloudWatch"): DrainSeconds while a drain and its completion last, for
// the stuck-drain alarm, and LimiterDegraded while running, for the alarm
// on a fleet deciding without Redis. It is off unless cloudwatch.enabled;
// the agent root builds it (New) and the drain supervisor calls
// DrainSeconds.
//
// Here: publisher.go.
package cwpublish
