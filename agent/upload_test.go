package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/redact"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/limiter"
)

// fakeS3 is gofakes3's in-memory S3 behind httptest, driven by the
// agent's S3 client (hooks.S3Client, held to the SDK's requests by
// TestS3ClientMatchesSDK) and read back with the real SDK client; it records the headers of every PutObject and answers 500
// to them while failing is set.
type fakeS3 struct {
	srv      *httptest.Server
	client   *s3.Client      // the SDK's, to read what was stored
	uploader *hooks.S3Client // the agent's

	mu      sync.Mutex
	puts    []http.Header
	failing bool
}

func startFakeS3(t *testing.T, bucket string) *fakeS3 {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	handler := gofakes3.New(backend).Server()
	f := &fakeS3{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			f.mu.Lock()
			f.puts = append(f.puts, r.Header.Clone())
			failing := f.failing
			f.mu.Unlock()
			if failing {
				http.Error(w, "<Error><Code>InternalError</Code></Error>", http.StatusInternalServerError)
				return
			}
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	// One attempt per call: a failing upload fails at once instead of
	// after the SDK's backoff.
	f.client = s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(f.srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""), RetryMaxAttempts: 1})
	f.uploader = hooks.NewS3Client(t.Context(), aws.Config{Region: "us-east-1", BaseEndpoint: aws.String(f.srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""), RetryMaxAttempts: 1},
		config.S3Config{PathStyle: true})
	return f
}

func (f *fakeS3) putHeaders() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.puts...)
}

// objects returns every object of bucket, by key.
func (f *fakeS3) objects(t *testing.T, bucket string) map[string]string {
	t.Helper()
	ctx := t.Context()
	list, err := f.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("list %s: %v", bucket, err)
	}
	out := map[string]string{}
	for _, o := range list.Contents {
		got, err := f.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: o.Key})
		if err != nil {
			t.Fatalf("get %s: %v", *o.Key, err)
		}
		b, err := io.ReadAll(got.Body)
		got.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[*o.Key] = string(b)
	}
	return out
}

const uploadSecret = "AKIAIOSFODNN7EXAMPLE"

// bigOutput is a diagnostic's output of n bytes or more holding an AWS
// access key id on its first line, and the same output redacted.
func bigOutput(n int) (raw, redacted string) {
	var b strings.Builder
	b.WriteString("key " + uploadSecret + " found\n")
	for i := 0; b.Len() < n; i++ {
		b.WriteString("filler line of a chatty diagnostic, number ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n")
	}
	raw = b.String()
	return raw, strings.Replace(raw, uploadSecret, "[REDACTED:aws_access_key_id]", 1)
}

// runUploadTask runs one task of a diagnostic that cats a file holding
// output, with results.s3 set by s3yaml and the fake as the S3 client,
// and returns its record and the agent.
func runUploadTask(t *testing.T, f *fakeS3, s3yaml, output string) (state.TaskRecord, *Agent) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "out.txt")
	if err := os.WriteFile(path, []byte(output), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]byte(`
workers: 1
diagnostics:
  - {name: dump, command: [/bin/cat, "`+path+`"], timeout: 30s, max_output: 1KiB}
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
lifecycle: {drain_timeout: 2m}
results:
  s3:
`+s3yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	src := queue.NewMemory(queue.MemoryOptions{Visibility: cfg.Queue.VisibilityTimeout})
	store := state.NewMemory(state.MemoryOptions{})
	lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Deps{Source: src, Store: store, Limiter: lim, S3: f.uploader, InstanceID: "i-up", Hostname: "up-host",
		Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	if _, err := src.Send(t.Context(), []byte(`{"id":"up-1","host":"web-01","diagnostic":"dump"}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task's outcome", func() bool { return a.Status().Outcomes[outcome.Succeeded] == 1 })
	a.Drain("test", "end of test")
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	rec, ok, err := store.Task(t.Context(), "up-1")
	if err != nil || !ok {
		t.Fatalf("record: ok=%v err=%v", ok, err)
	}
	return rec, a
}

// uploads reads autodiag_output_uploads_total{result} from the agent's
// registry.
func uploads(a *Agent, result string) float64 {
	mfs, err := a.Registry().Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != "autodiag_output_uploads_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// checkRecordKeepsMaxOutput: the record holds the first max_output (1KiB)
// bytes of the redacted output, marked truncated, as without the upload.
func checkRecordKeepsMaxOutput(t *testing.T, rec state.TaskRecord, redacted string) {
	t.Helper()
	if !rec.Truncated || rec.Output != redacted[:1<<10]+runner.TruncationMark {
		t.Errorf("record output (%d bytes, truncated %v), want the first 1KiB of the redacted output and the mark", len(rec.Output), rec.Truncated)
	}
	if strings.Contains(rec.Output, uploadSecret) {
		t.Error("record output holds the secret")
	}
}

// An uploaded output: the object at prefix/YYYY/MM/DD/<id>.txt holds the
// whole redacted output, PutObject asked for the configured encryption and
// storage class,
// the record carries output_url and keeps max_output, the view and the
// metric say so.
func TestUploadFullOutput(t *testing.T) {
	t.Parallel()
	raw, redacted := bigOutput(200 << 10)
	for _, tc := range []struct {
		name, sse string
		headers   map[string]string
	}{
		{"kms", "sse: aws:kms\n    kms_key_id: alias/autodiag\n", map[string]string{
			"X-Amz-Server-Side-Encryption": "aws:kms", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id": "alias/autodiag", "X-Amz-Storage-Class": ""}},
		{"aes256", "sse: AES256\n    storage_class: STANDARD_IA\n", map[string]string{
			"X-Amz-Server-Side-Encryption": "AES256", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id": "", "X-Amz-Storage-Class": "STANDARD_IA"}},
		{"bucket default", "", map[string]string{
			"X-Amz-Server-Side-Encryption": "", "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id": "", "X-Amz-Storage-Class": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startFakeS3(t, "diag-out")
			rec, a := runUploadTask(t, f, "    bucket: diag-out\n    prefix: fleet/a\n    "+tc.sse, raw)

			key := "fleet/a/" + rec.FinishedAt.UTC().Format("2006/01/02") + "/up-1.txt"
			if rec.OutputURL != "s3://diag-out/"+key || rec.OutputUpload != "" {
				t.Errorf("output_url %q output_upload %q, want s3://diag-out/%s and no failure", rec.OutputURL, rec.OutputUpload, key)
			}
			objs := f.objects(t, "diag-out")
			if body, ok := objs[key]; !ok || len(objs) != 1 {
				t.Errorf("objects %v, want exactly %s", keysOf(objs), key)
			} else if body != redacted {
				t.Errorf("object holds %d bytes (secret present: %v), want the %d bytes of the redacted output",
					len(body), strings.Contains(body, uploadSecret), len(redacted))
			}
			checkRecordKeepsMaxOutput(t, rec, redacted)
			puts := f.putHeaders()
			if len(puts) != 1 {
				t.Fatalf("%d PutObject requests, want 1", len(puts))
			}
			for h, want := range tc.headers {
				if got := puts[0].Get(h); got != want {
					t.Errorf("PutObject header %s = %q, want %q", h, got, want)
				}
			}
			// The object names the agent that ran the diagnostic, as the
			// record does.
			for h, want := range map[string]string{"X-Amz-Meta-Ran-On-Instance-Id": "i-up", "X-Amz-Meta-Ran-On-Hostname": "up-host"} {
				if got := puts[0].Get(h); got != want {
					t.Errorf("PutObject header %s = %q, want %q (the agent that ran it)", h, got, want)
				}
			}
			if want := (taskview.RanOn{InstanceID: "i-up", Hostname: "up-host"}); rec.RanOn == nil || *rec.RanOn != want {
				t.Errorf("record ran_on %v, want %v", rec.RanOn, want)
			}
			if v := rec.View(nil); v.OutputURL != rec.OutputURL {
				t.Errorf("view output_url %q, want %q", v.OutputURL, rec.OutputURL)
			}
			if ok, failed := uploads(a, "ok"), uploads(a, "failed"); ok != 1 || failed != 0 {
				t.Errorf("uploads ok=%v failed=%v, want 1 and 0", ok, failed)
			}
			lint, err := testutil.GatherAndLint(a.Registry(), "autodiag_output_uploads_total")
			if err != nil || len(lint) > 0 {
				t.Errorf("promlint: %v %v", lint, err)
			}
		})
	}
}

// A failed upload (S3 answers 500, or nothing listens) leaves the task
// succeeded with max_output in its record, output_upload failed, no
// output_url, and counts it.
func TestUploadFailureDoesNotFailTheTask(t *testing.T) {
	t.Parallel()
	raw, redacted := bigOutput(20 << 10)
	for _, tc := range []struct {
		name    string
		breakS3 func(f *fakeS3)
	}{
		{"500", func(f *fakeS3) { f.mu.Lock(); f.failing = true; f.mu.Unlock() }},
		{"closed", func(f *fakeS3) { f.srv.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startFakeS3(t, "diag-out")
			tc.breakS3(f)
			rec, a := runUploadTask(t, f, "    bucket: diag-out\n", raw)
			if rec.Outcome != outcome.Succeeded || rec.Status != state.StatusDone || rec.ExitCode == nil || *rec.ExitCode != 0 {
				t.Errorf("record %s %s exit %v, want done, succeeded, exit 0", rec.Status, rec.Outcome, rec.ExitCode)
			}
			if rec.OutputUpload != hooks.OutputUploadFailed || rec.OutputURL != "" {
				t.Errorf("output_upload %q output_url %q, want failed and none", rec.OutputUpload, rec.OutputURL)
			}
			if v := rec.View(nil); v.OutputUpload != hooks.OutputUploadFailed {
				t.Errorf("view output_upload %q, want failed", v.OutputUpload)
			}
			checkRecordKeepsMaxOutput(t, rec, redacted)
			if ok, failed := uploads(a, "ok"), uploads(a, "failed"); ok != 0 || failed != 1 {
				t.Errorf("uploads ok=%v failed=%v, want 0 and 1", ok, failed)
			}
		})
	}
}

// Output longer than max_size: the object holds the first max_size bytes
// of the redacted output and the truncation mark; the record its first max_output.
func TestUploadTruncatesAtMaxSize(t *testing.T) {
	t.Parallel()
	raw, redacted := bigOutput(64 << 10)
	f := startFakeS3(t, "diag-out")
	rec, _ := runUploadTask(t, f, "    bucket: diag-out\n    max_size: 8KiB\n", raw)
	// The output is redacted first, then cut at 8KiB.
	want := string(redact.Head([]byte(redacted), 8<<10)) + runner.TruncationMark
	objs := f.objects(t, "diag-out")
	if len(objs) != 1 {
		t.Fatalf("objects %v, want one", keysOf(objs))
	}
	for _, body := range objs {
		if body != want {
			t.Errorf("object holds %d bytes, want %d: the first 8KiB and the mark", len(body), len(want))
		}
	}
	checkRecordKeepsMaxOutput(t, rec, redacted)
}

// results.s3 problems name their key and line.
func TestS3ConfigErrors(t *testing.T) {
	t.Parallel()
	yaml := `lifecycle:
  drain_timeout: 1m
results:
  s3:
    bucket: Bad_Bucket
    prefix: /logs/
    max_size: 0
    sse: aws:sha
    kms_key_id: alias/x
    timeout: 1m
    storage_class: GLACIER
`
	_, err := config.Load([]byte(yaml), nil)
	want := map[string]int{"results.s3.bucket": 5, "results.s3.prefix": 6, "results.s3.max_size": 7,
		"results.s3.sse": 8, "results.s3.kms_key_id": 9, "results.s3.timeout": 10, "results.s3.storage_class": 11}
	wantProblemLines(t, err, want)
	cfg, err := config.Load([]byte("results:\n  s3: {bucket: diag-out, prefix: a/b, sse: aws:kms}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Results.S3; !s.Enabled() || s.MaxSize != config.DefaultS3MaxSize || s.Timeout != config.DefaultS3Timeout {
		t.Errorf("results.s3 %+v, want enabled with the default max_size and timeout", s)
	}
	if _, err := New(cfg, Deps{Source: queue.NewMemory(queue.MemoryOptions{}), Store: state.NewMemory(state.MemoryOptions{}),
		Limiter: mustLimiter(t, cfg)}); err == nil || !strings.Contains(err.Error(), "Deps.S3") {
		t.Errorf("New without an S3 client = %v, want an error naming Deps.S3", err)
	}
}

func mustLimiter(t *testing.T, cfg config.Config) *limiter.Limiter {
	t.Helper()
	lim, err := limiter.New(cfg.Limiter.Config, limiter.NewMemory(), limiter.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
