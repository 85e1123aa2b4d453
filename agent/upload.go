package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
)

// S3Config is results.s3: where the whole redacted output of every run
// goes, while the task record keeps the diagnostic's max_output. An empty
// Bucket turns the upload off.
type S3Config struct {
	// Bucket is an existing bucket; empty = no upload.
	Bucket string `yaml:"bucket"`
	// Prefix starts every object key, without a leading or trailing "/";
	// the key is prefix/YYYY/MM/DD/<task id>.txt (UTC date of finish).
	Prefix string `yaml:"prefix"`
	// MaxSize bounds what a run keeps for the upload; longer output is
	// cut and marked (default 10MiB). A diagnostic whose max_output is
	// larger keeps that much, so the object never holds less than the
	// record.
	MaxSize runner.Size `yaml:"max_size"`
	// SSE is the server-side encryption PutObject asks for: AES256 or
	// aws:kms; empty = the bucket's default encryption.
	SSE string `yaml:"sse"`
	// KMSKeyID is the key of aws:kms; empty = the AWS managed key.
	KMSKeyID string `yaml:"kms_key_id"`
	// PathStyle addresses the bucket in the path (endpoint/bucket/key),
	// for S3-compatible stores and fakes behind AWS_ENDPOINT_URL_S3.
	PathStyle bool `yaml:"path_style"`
	// Timeout bounds one upload, the SDK's retries included (default
	// 30s); it must be below lifecycle.drain_timeout.
	Timeout time.Duration `yaml:"timeout"`
}

// Defaults and bounds of results.s3. maxS3MaxSize bounds the output one
// run holds in memory (it is read whole, redacted, then sent).
const (
	DefaultS3MaxSize = runner.Size(10 << 20)
	DefaultS3Timeout = 30 * time.Second
	maxS3MaxSize     = runner.Size(1 << 30)
	maxS3Timeout     = 5 * time.Minute
	maxS3PrefixLen   = 512
)

// Server-side encryption values of results.s3.sse, as S3 spells them.
const (
	SSEAES256 = "AES256"
	SSEKMS    = "aws:kms"
)

// OutputUploadFailed is TaskRecord.OutputUpload when the upload failed.
const OutputUploadFailed = "failed"

// DefaultS3Config is results.s3 with its defaults and no bucket.
func DefaultS3Config() S3Config {
	return S3Config{MaxSize: DefaultS3MaxSize, Timeout: DefaultS3Timeout}
}

// Enabled reports whether outputs are uploaded.
func (c S3Config) Enabled() bool { return c.Bucket != "" }

var bucketPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// Validate reports every problem of results.s3; keys are relative to it.
func (c S3Config) Validate() error {
	var p problems
	if c.Bucket != "" && !bucketPattern.MatchString(c.Bucket) {
		p.addf("bucket", "%q is not an S3 bucket name (3 to 63 of a-z, 0-9, '.', '-')", c.Bucket)
	}
	switch {
	case strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/"):
		p.addf("prefix", "%q must not start or end with /", c.Prefix)
	case strings.Contains(c.Prefix, "//"):
		p.addf("prefix", "%q must not hold an empty path segment", c.Prefix)
	case len(c.Prefix) > maxS3PrefixLen:
		p.addf("prefix", "must be at most %d bytes", maxS3PrefixLen)
	case !utf8.ValidString(c.Prefix):
		p.addf("prefix", "must be UTF-8")
	}
	if c.MaxSize < 1 || c.MaxSize > maxS3MaxSize {
		p.addf("max_size", "must be between 1 and %d bytes (1GiB)", maxS3MaxSize)
	}
	switch c.SSE {
	case "", SSEAES256, SSEKMS:
	default:
		p.addf("sse", "must be AES256 or aws:kms, not %q", c.SSE)
	}
	if c.KMSKeyID != "" && c.SSE != SSEKMS {
		p.addf("kms_key_id", "needs sse: aws:kms")
	}
	if c.Timeout < time.Second || c.Timeout > maxS3Timeout {
		p.addf("timeout", "must be between 1s and %s, not %s", maxS3Timeout, c.Timeout)
	}
	return p.err()
}

// s3API is the S3 call the uploader makes; *s3.Client is the real one.
type s3API interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

var _ s3API = (*s3.Client)(nil)

// NewS3Client is the S3 client of results.s3 from the SDK's config:
// AWS_ENDPOINT_URL_S3 (read by the SDK) points it elsewhere, PathStyle
// addresses the bucket in the path.
func NewS3Client(awsCfg aws.Config, c S3Config) *s3.Client {
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) { o.UsePathStyle = c.PathStyle })
}

// fullOutputRunner runs every diagnostic with its output cap raised to
// results.s3.max_size, so the upload gets the whole output; the uploader
// cuts what the record keeps back to the diagnostic's max_output.
type fullOutputRunner struct {
	Runner
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
	api  s3API
	cfg  S3Config
	base context.Context // ends on a fast exit
	log  *slog.Logger
	// uploads counts uploads by result (ok, failed).
	uploads *prometheus.CounterVec
}

func newUploader(api s3API, cfg S3Config, base context.Context, log *slog.Logger, reg prometheus.Registerer) *uploader {
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
	if err := u.put(key, res.Output); err != nil {
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

// put sends one object, bounded by results.s3.timeout on a context of
// its own.
func (u *uploader) put(key string, body []byte) error {
	ctx, cancel := context.WithTimeout(u.base, u.cfg.Timeout)
	defer cancel()
	in := &s3.PutObjectInput{
		Bucket:        aws.String(u.cfg.Bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
		ContentType:   aws.String("text/plain; charset=utf-8"),
	}
	switch u.cfg.SSE {
	case SSEAES256:
		in.ServerSideEncryption = types.ServerSideEncryptionAes256
	case SSEKMS:
		in.ServerSideEncryption = types.ServerSideEncryptionAwsKms
		if u.cfg.KMSKeyID != "" {
			in.SSEKMSKeyId = aws.String(u.cfg.KMSKeyID)
		}
	}
	if _, err := u.api.PutObject(ctx, in); err != nil {
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
func (a *Agent) wireUpload() error {
	c := a.cfg.Results.S3
	if !c.Enabled() {
		return nil
	}
	if a.d.S3 == nil {
		return errors.New("agent: results.s3.bucket is set but Deps.S3 is nil")
	}
	a.pipeline.uploader = newUploader(a.d.S3, c, a.hard, a.log, a.d.Registry)
	a.pipeline.runner = fullOutputRunner{Runner: a.pipeline.runner, maxSize: c.MaxSize}
	return nil
}
