// Package alert turns alerts from the alerting systems fleets run
// (Prometheus Alertmanager, Zabbix, CloudWatch alarms via SNS or
// EventBridge, and a generic JSON shape) into diagnostic tasks.
//
// The stages are separate so each can be used alone: a decoder makes a
// Payload of normalised Alerts out of one body (DecodeAlertmanager,
// DecodeZabbix, DecodeCloudWatch, DecodeGeneric, and Recognize for bodies
// received on the task queue); a Router applies the configured routes
// (first match wins) and makes task.Task values, validated before they go
// anywhere; Handler is the alert listener's HTTP interface, which answers
// every alert of a payload with accepted, ignored or rejected and hands
// the accepted tasks to a Sender.
//
// Decoding is strict where it protects a decision and lenient where the
// sender's format grows: every body is size-capped, valid UTF-8, one JSON
// value, with member names matched exactly and no duplicate names (a
// second "host" a reviewer never sees); unknown members are refused in the
// formats this project defines (generic, the Zabbix media type) and
// tolerated in the ones other projects version (Alertmanager, CloudWatch).
package alert
