package agent

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/hooks"
	"github.com/autodiag/autodiag/internal/outcome"
)

// countingS3 reads each object's body through without keeping it.
type countingS3 struct{ n int64 }

func (c *countingS3) PutObject(_ context.Context, in hooks.PutObjectInput) error {
	n, err := io.Copy(io.Discard, bytes.NewReader(in.Body))
	c.n += n
	return err
}

var _ hooks.S3API = (*countingS3)(nil)

// TestUploadMemory: with results.s3 on, a run of N bytes costs the
// runner's buffer, the redacted copy and the marked cut copy — not a
// fourth copy as a string before the record is cut to max_output, nor
// any copy in the upload itself. Measured as bytes allocated over the
// whole task, which includes the runner's buffer growth (up to 2N).
func TestUploadMemory(t *testing.T) {
	n := 32 << 20
	if raceEnabled {
		// Allocation is not asserted under the race detector, which
		// makes the 32 MiB run's redaction take about the 20 s waitFor
		// gives it on a busy 2-core machine: the upload and the cut
		// record are checked on a smaller run.
		n = 4 << 20
	}
	path := filepath.Join(t.TempDir(), "out.txt")
	if err := writeBigOutput(path, n); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]byte(`
workers: 1
diagnostics:
  - {name: dump, command: [/bin/cat, "`+path+`"], timeout: 30s, max_output: 1KiB}
limiter: {hosts: {allow: ['^[a-z0-9.-]+$']}}
lifecycle: {drain_timeout: 2m}
results:
  s3: {bucket: diag-out, max_size: 64MiB}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	fake := &countingS3{}
	ma, stop := runMemAgent(t, cfg, Deps{S3: fake, InstanceID: "i-up", Registry: prometheus.NewRegistry()})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := ma.src.Send(t.Context(), []byte(`{"id":"up-1","host":"web-01","diagnostic":"dump"}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task's outcome", func() bool { return ma.Status().Outcomes[outcome.Succeeded] == 1 })
	runtime.ReadMemStats(&after)
	stop()
	if fake.n < int64(n) {
		t.Fatalf("uploaded %d bytes, want at least %d", fake.n, n)
	}
	rec, _, _ := ma.store.Task(t.Context(), "up-1")
	if len(rec.Output) > 2<<10 || strings.Contains(rec.Output, uploadSecret) {
		t.Fatalf("record output %d bytes", len(rec.Output))
	}
	alloc := float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
	// Measured: 7.0 (runner 4N in its doubling growth, the lowered scan
	// copy 2N over two passes, the redacted and the marked copies); 8.0
	// with the record's string copy of the whole output.
	t.Logf("allocated %.2f × the output over the task", alloc)
	if alloc > 7.5 && !raceEnabled {
		t.Errorf("allocated %.2f × the output over the task, want at most 7.5", alloc)
	}
}

// writeBigOutput writes bigOutput(n) to path, the test's copies gone
// before the task's allocations are measured.
func writeBigOutput(path string, n int) error {
	raw, _ := bigOutput(n)
	return os.WriteFile(path, []byte(raw), 0o600)
}
