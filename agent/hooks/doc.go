// Package hooks is what happens around a task's end and a drain, behind
// one value (*Hooks) that the worker takes as worker.Hooks and the
// supervisor as supervisor.Hooks: the redactor every output passes
// (results.go), the upload of the whole output to results.s3 (upload.go),
// the notifications (notifier.go, over agent/notify) and the root-cause
// reports (reports.go, over agent/report), written now on request
// (reportnow.go) or, with report.investigate, by an investigation whose
// tool calls are tasks on the agent's own queue (investigations.go, over
// agent/investigate). Each is off unless configured,
// and nothing here may hold a drain past its deadline. The view of a task
// that the API, notifications and reports share is agent/taskview's
// (state.TaskRecord.View makes it).
//
// It may import the worker for its types (Runner) but not the agent root
// or the supervisor.
package hooks
