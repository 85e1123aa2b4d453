// Package admin is the agent's admin API (README "Admin HTTP"), served on
// admin_addr: status, drain, tasks in (through the worker's one way in,
// worker.Submitter) and out, reports on demand, verdicts, limiter checks
// and approvals. It takes the agent's parts in Options and never builds
// one; the agent root wires it.
//
// Here: admin.go (Status, Handler, POST /v1/tasks, the auth guard and
// the bounded server), tasks.go (GET /v1/tasks/{id} and the recent tasks),
// calls.go (the admin requests' turns at Redis), reportnow.go (POST
// /v1/tasks/{id}/report), feedback.go (report verdicts and resolutions)
// and limitscheck.go (GET /v1/limits/check).
package admin
