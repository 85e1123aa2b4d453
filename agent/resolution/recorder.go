package resolution

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/alert"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/clock"
)

// Confidences are the values of the confidence label: the report's
// confidence, "none" when it states none.
var Confidences = []string{"confirmed", "likely", "inconclusive", "none"}

// Within is the bound of the within_1h label.
const Within = time.Hour

// Key is the alert key of an alert: its source and the event id that
// fired (a resolved alert's carries "/resolved").
func Key(source, eventID string) string {
	return source + ":" + strings.TrimSuffix(eventID, "/resolved")
}

// tasks is what the Recorder uses of the task store.
type tasks interface {
	Task(ctx context.Context, id string) (state.TaskRecord, bool, error)
	SetReport(ctx context.Context, id string, report json.RawMessage) (bool, error)
}

// Recorder indexes alert tasks as they end and records resolutions.
type Recorder struct {
	store   Store
	tasks   tasks
	clock   clock.Clock
	timeout time.Duration // of each store call
	log     *slog.Logger

	seconds  prometheus.Histogram
	resolved *prometheus.CounterVec
	// notify is told once per resolved alert, with one of its tasks (one
	// with a report when there is one, resolved_at in it); nil = nobody.
	notify func(rec state.TaskRecord)
}

// Notify sets who is told of each resolved alert (the `resolved` event
// of the notification sinks).
func (r *Recorder) Notify(f func(rec state.TaskRecord)) { r.notify = f }

// NewRecorder returns a recorder over store and the task store, its
// metrics on reg with every category (the catalog's diagnostics) ×
// confidence × within_1h at 0.
func NewRecorder(store Store, ts tasks, diagnostics []string, clk clock.Clock, timeout time.Duration, log *slog.Logger,
	reg prometheus.Registerer) (*Recorder, error) {
	if clk == nil {
		clk = clock.Wall{}
	}
	r := &Recorder{store: store, tasks: ts, clock: clk, timeout: max(timeout, time.Second), log: log,
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "autodiag_report_resolution_seconds",
			Help:    "Time from a root-cause report to its alert's resolution (Alertmanager resolved, Zabbix recovery).",
			Buckets: []float64{60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400}}),
		resolved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "autodiag_report_resolutions_total",
			Help: "Resolved alerts with a report, by category (the diagnostic), the report's confidence, and whether it resolved within 1 h of the report."},
			[]string{"category", "confidence", "within_1h"}),
	}
	for _, d := range diagnostics {
		for _, c := range Confidences {
			r.resolved.WithLabelValues(d, c, "true")
			r.resolved.WithLabelValues(d, c, "false")
		}
	}
	for _, c := range []prometheus.Collector{r.seconds, r.resolved} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Log is the log of stamped reports (what report-stats counts).
func (r *Recorder) Log(ctx context.Context) ([]Entry, error) { return r.store.Log(ctx) }

// TaskEnded indexes a finished task under its alert; a task from no
// alert is not indexed.
func (r *Recorder) TaskEnded(ctx context.Context, rec state.TaskRecord) {
	if r == nil || rec.Alert == nil || rec.Alert.EventID == "" {
		return
	}
	c, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := r.store.Index(c, Key(rec.Alert.Source, rec.Alert.EventID), rec.ID); err != nil {
		r.log.Warn("alert task not indexed; its alert's resolution will not stamp it", "task_id", rec.ID, "err", err)
	}
}

// AlarmFiring remembers that a CloudWatch alarm went into ALARM with
// eventID (alarm@time), so that its OK, which names the alarm and not the
// firing, resolves this firing's tasks (worker.AlarmWatcher). One store
// call.
func (r *Recorder) AlarmFiring(ctx context.Context, source, eventID string) {
	if r == nil || eventID == "" {
		return
	}
	c, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := r.store.SetFiring(c, source+":"+alert.AlarmOf(eventID), eventID); err != nil {
		r.log.Warn("alarm firing not remembered; its OK will not stamp its reports", "alarm", alert.AlarmOf(eventID), "err", err)
	}
}

// AlarmCleared records that a CloudWatch alarm went back to OK: the
// resolution of its last firing (Resolved), if one is known.
func (r *Recorder) AlarmCleared(ctx context.Context, source, alarm string) {
	if r == nil || alarm == "" {
		return
	}
	c, cancel := context.WithTimeout(ctx, r.timeout)
	eventID, err := r.store.Firing(c, source+":"+alarm)
	cancel()
	switch {
	case err != nil:
		r.log.Warn("alarm OK not recorded", "alarm", alarm, "err", err)
	case eventID == "":
		r.log.Debug("alarm OK without a known firing", "alarm", alarm)
	default:
		r.Resolved(ctx, source, eventID)
	}
}

// ReportWritten stamps resolved_at on rec's report when its alert
// resolved before the report was written (a report takes minutes; the
// alert may clear meanwhile), and returns the record as it is then. One
// store call for a task from an alert, none for another.
func (r *Recorder) ReportWritten(ctx context.Context, rec state.TaskRecord) state.TaskRecord {
	if r == nil || rec.Alert == nil || rec.Alert.EventID == "" {
		return rec
	}
	c, cancel := context.WithTimeout(ctx, r.timeout)
	at, resolved, err := r.store.ResolvedAt(c, Key(rec.Alert.Source, rec.Alert.EventID))
	cancel()
	if err != nil {
		r.log.Warn("alert resolution not read; a late report is not stamped", "task_id", rec.ID, "err", err)
		return rec
	}
	if !resolved {
		return rec
	}
	if got, found, ok := r.stamp(ctx, rec.ID, at); found && ok {
		r.log.Info("report written after its alert resolved: stamped", "task_id", rec.ID)
		return got
	}
	return rec
}

// Resolved records that the alert (source, event id) resolved now: the
// first time, each of its tasks' reports gets resolved_at, and the time
// from the report to now is measured. It starts nothing, and is bounded:
// one store call, then a read and a write per task of the alert.
func (r *Recorder) Resolved(ctx context.Context, source, eventID string) {
	if r == nil || eventID == "" {
		return
	}
	now := r.clock.Now().UTC()
	key := Key(source, eventID)
	c, cancel := context.WithTimeout(ctx, r.timeout)
	ids, first, err := r.store.Resolve(c, key, now)
	cancel()
	if err != nil {
		r.log.Warn("alert resolution not recorded", "alert", key, "err", err)
		return
	}
	if !first {
		return // a repeat of the resolved notification
	}
	slices.Sort(ids)
	stamped := 0
	// The event carries the first task whose report was stamped, else the
	// first task found.
	var tell *state.TaskRecord
	tellStamped := false
	for _, id := range ids {
		rec, found, ok := r.stamp(ctx, id, now)
		if ok {
			stamped++
		}
		if found && (tell == nil || ok && !tellStamped) {
			tell, tellStamped = &rec, ok
		}
	}
	r.log.Info("alert resolved", "alert", key, "tasks", len(ids), "reports_stamped", stamped)
	if tell != nil && r.notify != nil {
		r.notify(*tell)
	}
}

// stamp writes resolved_at into task id's report and measures it: the
// time from the report to the resolution, unless the report came after
// it (it cannot have helped: stamped, not counted). It returns the record
// (with the stamped report), whether there is one, and whether its report
// was stamped (false: no report, yet or at all).
func (r *Recorder) stamp(ctx context.Context, id string, now time.Time) (state.TaskRecord, bool, bool) {
	c, cancel := context.WithTimeout(ctx, 2*r.timeout)
	defer cancel()
	rec, found, err := r.tasks.Task(c, id)
	if err != nil || !found {
		return rec, false, false
	}
	var rep report.Result
	if len(rec.Report) == 0 || json.Unmarshal(rec.Report, &rep) != nil || rep.Status == "" || rep.ResolvedAt != nil {
		return rec, true, false
	}
	rep.ResolvedAt = &now
	body, err := json.Marshal(rep)
	if err != nil {
		return rec, true, false
	}
	if ok, err := r.tasks.SetReport(c, id, body); err != nil || !ok {
		r.log.Warn("resolved_at not written to the report", "task_id", id, "err", err)
		return rec, true, false
	}
	rec.Report = body
	if rep.Status != report.StatusOK || rep.CreatedAt.IsZero() || rep.CreatedAt.After(now) {
		return rec, true, true
	}
	took := max(now.Sub(rep.CreatedAt), 0)
	r.seconds.Observe(took.Seconds())
	conf := rep.Confidence
	if conf == "" {
		conf = "none"
	}
	if err := r.store.Append(c, Entry{TaskID: id, Diagnostic: rec.Diagnostic, Confidence: conf, ReportAt: rep.CreatedAt, ResolvedAt: now}); err != nil {
		r.log.Warn("resolution not logged for report-stats", "task_id", id, "err", err)
	}
	within := "false"
	if took <= Within {
		within = "true"
	}
	r.resolved.WithLabelValues(rec.Diagnostic, conf, within).Inc()
	return rec, true, true
}
