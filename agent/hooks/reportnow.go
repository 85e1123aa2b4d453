package hooks

import (
	"context"
	"errors"
	"time"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
)

// ReportsOn says whether report.enabled built the reports.
func (h *Hooks) ReportsOn() bool { return h.reports != nil }

// ReportNow writes the report of rec, a finished task, now through the
// agent's own report limits (the cooldown and daily cap it applies to
// every report; force: the cap only), stores it in the record and sends
// the `report` event (POST /v1/tasks/{id}/report). diag is the catalog's
// entry, nil when the catalog no longer has it; storeTimeout bounds the
// store write, which outlives ctx's end. Reports must be on (ReportsOn).
func (h *Hooks) ReportNow(ctx context.Context, rec state.TaskRecord, diag *runner.Diagnostic, force bool,
	storeTimeout time.Duration) (report.Result, error) {
	ev := EvidenceOf(rec, diag)
	if h.redactor != nil {
		ev.Output = h.redactor.RedactString(ev.Output)
	}
	job := report.Job{ID: rec.ID, Evidence: ev, Force: force}
	res := h.reports.r.Process(ctx, job)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := h.reports.sink.Report(wctx, job, res); err != nil && !errors.Is(err, context.Canceled) {
		return res, err
	}
	return res, nil
}
