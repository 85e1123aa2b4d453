// Package resolution answers "did it clear?": it remembers which tasks
// an alert made, and when the alert's source says it resolved
// (Alertmanager's resolved, a Zabbix recovery), stamps resolved_at on the
// reports of those tasks and measures the time from the report to the
// resolution, by category (the diagnostic) and the report's confidence.
// A resolution starts nothing.
package resolution
