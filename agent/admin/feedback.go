package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/feedback"
	"github.com/autodiag/autodiag/agent/internal/httpjson"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/resolution"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
)

// Feedback serves the responders' verdicts on reports:
// POST /v1/tasks/{id}/feedback and GET /v1/reports/stats; Slack's
// buttons record into the same store and counter (Store, Count).
type Feedback struct {
	store feedback.Store
	// resolutions is the log of reports whose alert resolved (the
	// table's resolution columns); nil = none.
	resolutions interface {
		Log(ctx context.Context) ([]resolution.Entry, error)
	}
	tasks   state.TaskStore
	red     *redact.Redactor
	clock   clock.Clock
	timeout time.Duration // of a Redis call (redis.timeout)
	total   *prometheus.CounterVec
}

// maxFeedbackBody bounds a verdict's request body.
const maxFeedbackBody = 8 << 10

// NewFeedback builds the verdicts' API over store (nil = in memory), the
// resolutions' log and the task records, with
// autodiag_report_feedback_total on reg.
func NewFeedback(store feedback.Store, resolutions *resolution.Recorder, tasks state.TaskStore, red *redact.Redactor, clk clock.Clock, timeout time.Duration,
	reg prometheus.Registerer) (*Feedback, error) {
	if store == nil {
		store = feedback.NewMemory()
	}
	total := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_report_feedback_total",
		Help: "Verdicts responders gave on root-cause reports (autodiag feedback), by verdict: good or wrong."}, []string{"verdict"})
	for _, v := range []string{feedback.Good, feedback.Wrong} {
		total.WithLabelValues(v)
	}
	if err := reg.Register(total); err != nil {
		return nil, err
	}
	return &Feedback{store: store, resolutions: resolutions, tasks: tasks, red: red, clock: clk, timeout: max(timeout, time.Second), total: total}, nil
}

// Store is where the verdicts are kept.
func (f *Feedback) Store() feedback.Store { return f.store }

// Count counts one recorded verdict in autodiag_report_feedback_total.
func (f *Feedback) Count(verdict string) { f.total.WithLabelValues(verdict).Inc() }

// post records one person's verdict on a task's report: 201, or 409 with
// the verdict that person gave before; 404 for an unknown task, 409 for a
// task without a report.
func (f *Feedback) post(calls *redisCalls) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		var in struct {
			Verdict string `json:"verdict"`
			By      string `json:"by"`
			Note    string `json:"note"`
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFeedbackBody))
		if err == nil {
			err = json.Unmarshal(body, &in)
		}
		if err != nil {
			httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": "want JSON {verdict, by, note}", "reason": "malformed_json"})
			return
		}
		v := feedback.Verdict{TaskID: id, Verdict: in.Verdict, By: in.By, Note: in.Note, At: f.clock.Now().UTC()}
		if err := v.Validate(); err != nil {
			httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "reason": "invalid_feedback"})
			return
		}
		// A note is what a person typed: it may quote a secret.
		v.Note = f.red.RedactString(v.Note)
		var rec state.TaskRecord
		var ok bool
		var got feedback.Verdict
		if !calls.do(r.Context(), func(ctx context.Context) {
			sctx, cancel := context.WithTimeout(ctx, 2*f.timeout) // the record, then the verdict
			defer cancel()
			if rec, ok, err = f.tasks.Task(sctx, id); err != nil || !ok || len(rec.Report) == 0 || string(rec.Report) == "null" {
				return
			}
			var rep report.Result
			_ = json.Unmarshal(rec.Report, &rep)
			v.Diagnostic, v.Confidence = rec.Diagnostic, rep.Confidence
			got, err = f.store.Record(sctx, v)
		}) {
			calls.busy(w)
			return
		}
		switch {
		case errors.Is(err, feedback.ErrAlreadyRecorded):
			httpjson.Write(w, http.StatusConflict, map[string]any{"error": "a verdict of " + v.By + " on task " + id + " is already recorded",
				"reason": "already_recorded", "feedback": got})
		case err != nil:
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error(), "reason": "state_unavailable"})
		case !ok:
			httpjson.Write(w, http.StatusNotFound, map[string]string{"error": "task " + id + " not found", "reason": "not_found"})
		case got.TaskID == "":
			httpjson.Write(w, http.StatusConflict, map[string]string{"error": "task " + id + " has no report", "reason": "no_report"})
		default:
			f.total.WithLabelValues(got.Verdict).Inc()
			httpjson.Write(w, http.StatusCreated, map[string]any{"feedback": got})
		}
	}
}

// stats answers the precision table of the verdicts' log.
func (f *Feedback) stats(calls *redisCalls) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var log []feedback.Verdict
		var res []feedback.Resolution
		var err error
		if !calls.do(r.Context(), func(ctx context.Context) {
			// Each log is up to 100,000 entries.
			sctx, cancel := context.WithTimeout(ctx, max(f.timeout, 5*time.Second))
			defer cancel()
			if log, err = f.store.Log(sctx); err != nil || f.resolutions == nil {
				return
			}
			var es []resolution.Entry
			es, err = f.resolutions.Log(sctx)
			for _, e := range es {
				res = append(res, feedback.Resolution{Diagnostic: e.Diagnostic, Confidence: e.Confidence,
					Within1h: e.ResolvedAt.Sub(e.ReportAt) <= resolution.Within})
			}
		}) {
			calls.busy(w)
			return
		}
		if err != nil {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error(), "reason": "state_unavailable"})
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]any{"verdicts": len(log), "resolutions": len(res), "rows": feedback.Table(log, res)})
	}
}
