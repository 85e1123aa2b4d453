package hooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/worker"
)

// OutputUploadFailed is TaskRecord.OutputUpload when the upload failed.
const OutputUploadFailed = "failed"

// FullOutput is r with, when results.s3 uploads each run's whole output,
// every diagnostic's output cap raised to results.s3.max_size, so the
// upload gets the whole output; the uploader cuts what the record keeps
// back to the diagnostic's max_output. r itself when the upload is off.
func FullOutput(r worker.Runner, c config.S3Config) worker.Runner {
	if !c.Enabled() {
		return r
	}
	return fullOutputRunner{Runner: r, maxSize: c.MaxSize}
}

type fullOutputRunner struct {
	worker.Runner
	maxSize runner.Size
}

func (r fullOutputRunner) Run(ctx context.Context, d runner.Diagnostic, argv []string) runner.Result {
	d = d.WithDefaults()
	d.MaxOutput = max(d.MaxOutput, r.maxSize+redact.CutSlack)
	return r.Runner.Run(ctx, d, argv)
}

// uploader puts each run's whole redacted output in S3 before its record
// is finished. A failed upload is counted, logged and written in the
// record (output_upload: failed); it never changes the task's outcome.
type uploader struct {
	api  S3API
	cfg  config.S3Config
	base context.Context // ends on a fast exit
	log  *slog.Logger
	// uploads counts uploads by result (ok, failed).
	uploads *prometheus.CounterVec
}

func newUploader(api S3API, cfg config.S3Config, base context.Context, log *slog.Logger, reg prometheus.Registerer) *uploader {
	u := &uploader{api: api, cfg: cfg, base: base, log: log.With("component", "upload"),
		uploads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_output_uploads_total",
			Help: "Uploads of a run's full output to results.s3, by result (ok, failed).",
		}, []string{"result"})}
	reg.MustRegister(u.uploads)
	for _, r := range []string{"ok", "failed"} {
		u.uploads.WithLabelValues(r)
	}
	return u
}

// key is where the output of task id, finished at finished, goes.
func (u *uploader) key(id string, finished time.Time) string {
	k := finished.UTC().Format("2006/01/02") + "/" + id + ".txt"
	if u.cfg.Prefix != "" {
		k = u.cfg.Prefix + "/" + k
	}
	return k
}

// keep uploads res.Output (redacted, up to max_size) for rec, sets
// rec.OutputURL or rec.OutputUpload, then cuts res.Output to the
// diagnostic's max_output, as without the upload; the caller copies it
// into the record. The object's body is read from res.Output in place.
// A nil uploader does nothing.
func (u *uploader) keep(rec *state.TaskRecord, res *runner.Result, d runner.Diagnostic) {
	if u == nil {
		return
	}
	key := u.key(rec.ID, rec.FinishedAt)
	if err := u.put(key, res.Output, ranOnMetadata(rec)); err != nil {
		u.uploads.WithLabelValues("failed").Inc()
		rec.OutputUpload = OutputUploadFailed
		u.log.Warn("uploading the full output failed; the record keeps max_output", "task_id", rec.ID,
			"bucket", u.cfg.Bucket, "key", key, "bytes", len(res.Output), "err", err)
	} else {
		u.uploads.WithLabelValues("ok").Inc()
		rec.OutputURL = "s3://" + u.cfg.Bucket + "/" + key
	}
	res.Output, res.Truncated = capOutput(res.Output, res.Truncated, int(d.WithDefaults().MaxOutput))
}

// S3 user metadata (x-amz-meta-*) of an uploaded output: the agent that
// ran the diagnostic (the record's ran_on), so that the object says which
// machine it describes without its record.
const (
	MetaRanOnInstanceID = "ran-on-instance-id"
	MetaRanOnHostname   = "ran-on-hostname"
)

// ranOnMetadata is the object metadata naming where rec's diagnostic ran;
// nil when the record names no machine. Metadata travels as HTTP headers:
// a value that is not printable ASCII is left out rather than failing the
// upload.
func ranOnMetadata(rec *state.TaskRecord) map[string]string {
	if rec.RanOn == nil {
		return nil
	}
	m := map[string]string{}
	for k, v := range map[string]string{MetaRanOnInstanceID: rec.RanOn.InstanceID, MetaRanOnHostname: rec.RanOn.Hostname} {
		if v != "" && headerSafe(v) {
			m[k] = v
		}
	}
	return m
}

// headerSafe reports whether v is printable ASCII.
func headerSafe(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// put sends one object with its user metadata, bounded by
// results.s3.timeout on a context of its own.
func (u *uploader) put(key string, body []byte, meta map[string]string) error {
	ctx, cancel := context.WithTimeout(u.base, u.cfg.Timeout)
	defer cancel()
	in := PutObjectInput{Bucket: u.cfg.Bucket, Key: key, Body: body, ContentType: "text/plain; charset=utf-8",
		Metadata: meta, StorageClass: u.cfg.StorageClass, SSE: u.cfg.SSE} // SSE: "", AES256 or aws:kms (S3Config.Validate)
	if u.cfg.SSE == config.SSEKMS {
		in.SSEKMSKeyID = u.cfg.KMSKeyID
	}
	if err := u.api.PutObject(ctx, in); err != nil {
		return fmt.Errorf("upload: put s3://%s/%s: %w", u.cfg.Bucket, key, err)
	}
	return nil
}

// capOutput cuts out, which the runner marked truncated or not, to limit
// bytes on a rune boundary with runner.TruncationMark after them.
func capOutput(out []byte, truncated bool, limit int) ([]byte, bool) {
	body := out
	if truncated {
		body = bytes.TrimSuffix(out, []byte(runner.TruncationMark))
	}
	if len(body) <= limit {
		return out, truncated
	}
	head := redact.Head(body, limit)
	// Clipped, so that the mark lands in a new array, not over out's bytes.
	return append(head[:len(head):len(head)], runner.TruncationMark...), true
}

// wireUpload builds the uploader of results.s3 and raises the runner's
// output cap to its max_size; nothing when results.s3 is off.
func (b builder) wireUpload(o Options) error {
	h := b.h
	c := o.Config.Results.S3
	if !c.Enabled() {
		return nil
	}
	if o.S3 == nil {
		return errors.New("hooks: results.s3.bucket is set but Deps.S3 is nil")
	}
	h.uploader = newUploader(o.S3, c, o.Base, o.Logger, o.Registry)
	return nil
}
