// Package investigate is the root-cause report that may run more
// diagnostics: the model is offered the catalog's diagnostics marked
// `investigate: true` as tools, and each call it makes is judged (offered,
// in scope, within the calls of a step and the budgets) and then submitted
// as a task through the agent's own validation, limiter, caps, breaker,
// runner, record and redaction (origin investigation, with its parent,
// investigation id and step). Refusals are answered to the model and
// listed under Gaps; budgets (steps, tokens, wall time, a fleet-wide daily
// budget) end the loop with one last turn without tools. The agent passes
// in narrow interfaces: Tasks (submit and wait for the record), Budget,
// the report Provider, the tools. Config is the `report.investigate:`
// section (config.go).
package investigate
