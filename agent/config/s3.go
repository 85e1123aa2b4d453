package config

import (
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/autodiag/autodiag/agent/runner"
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
	// StorageClass is the objects' S3 storage class (S3StorageClasses);
	// empty = the bucket's default (STANDARD). Outputs are written once
	// and read rarely, so an infrequent-access class often costs less;
	// the archive classes are refused, as `autodiag show` reads an output
	// at once.
	StorageClass string `yaml:"storage_class"`
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

// S3StorageClasses are the values of results.s3.storage_class, as S3
// spells them: the classes whose objects are read without a restore.
var S3StorageClasses = []string{"STANDARD", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER_IR"}

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
	if c.StorageClass != "" && !slices.Contains(S3StorageClasses, c.StorageClass) {
		p.addf("storage_class", "must be one of %s, not %q", strings.Join(S3StorageClasses, ", "), c.StorageClass)
	}
	if c.Timeout < time.Second || c.Timeout > maxS3Timeout {
		p.addf("timeout", "must be between 1s and %s, not %s", maxS3Timeout, c.Timeout)
	}
	return p.err()
}
