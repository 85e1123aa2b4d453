package hooks

import (
	"context"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/runner"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/outcome"
)

// capOutput cuts on a rune boundary and marks once, whether or not the
// runner already cut and marked.
func TestCapOutput(t *testing.T) {
	t.Parallel()
	mark := runner.TruncationMark
	for _, tc := range []struct {
		name      string
		in        string
		truncated bool
		limit     int
		want      string
		wantTrunc bool
	}{
		{"short", "abc", false, 5, "abc", false},
		{"exact", "abcde", false, 5, "abcde", false},
		{"long", "abcdefg", false, 5, "abcde" + mark, true},
		{"runner cut within the limit", "abc" + mark, true, 5, "abc" + mark, true},
		{"runner cut past the limit", "abcdefg" + mark, true, 5, "abcde" + mark, true},
		{"rune boundary", "abcdé", false, 5, "abcd" + mark, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, trunc := capOutput([]byte(tc.in), tc.truncated, tc.limit)
			if string(got) != tc.want || trunc != tc.wantTrunc {
				t.Errorf("capOutput(%q, %v, %d) = %q, %v; want %q, %v", tc.in, tc.truncated, tc.limit, got, trunc, tc.want, tc.wantTrunc)
			}
		})
	}
}

// hangingS3 answers no PutObject until its context ends, and records
// when that was.
type hangingS3 struct{ ended time.Time }

func (h *hangingS3) PutObject(ctx context.Context, _ PutObjectInput) error {
	<-ctx.Done()
	h.ended = time.Now()
	return ctx.Err()
}

var _ S3API = (*hangingS3)(nil)

// An S3 that never answers holds the task's end for exactly
// results.s3.timeout, then the upload counts as failed and the record
// keeps max_output.
func TestUploadBoundedByItsTimeout(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := config.DefaultS3Config()
		cfg.Bucket, cfg.Timeout = "diag-out", 7*time.Second
		h := &hangingS3{}
		u := newUploader(h, cfg, context.Background(), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
		start := time.Now()
		rec := state.TaskRecord{ID: "t1", FinishedAt: start}
		res := runner.Result{Outcome: outcome.Succeeded, Output: []byte(strings.Repeat("x", 100))}
		u.keep(&rec, &res, runner.Diagnostic{MaxOutput: 10})
		if got := h.ended.Sub(start); got != cfg.Timeout {
			t.Errorf("the upload ended after %s, want results.s3.timeout %s", got, cfg.Timeout)
		}
		if rec.OutputUpload != OutputUploadFailed || rec.OutputURL != "" || testutil.ToFloat64(u.uploads.WithLabelValues("failed")) != 1 {
			t.Errorf("record %+v, want output_upload failed, no URL, one failed upload counted", rec)
		}
		if string(res.Output) != strings.Repeat("x", 10)+runner.TruncationMark || !res.Truncated {
			t.Errorf("result output %q, want max_output (10 bytes) and the mark", res.Output)
		}
	})
}

// The object metadata names where the diagnostic ran; a record that
// names no machine adds none, and a value S3 cannot carry as a header is
// left out instead of failing the upload.
func TestRanOnMetadata(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		ranOn *taskview.RanOn
		want  map[string]string
	}{
		{"never ran", nil, nil},
		{"both", &taskview.RanOn{InstanceID: "i-0abc", Hostname: "ip-10-0-1-5"},
			map[string]string{MetaRanOnInstanceID: "i-0abc", MetaRanOnHostname: "ip-10-0-1-5"}},
		{"no hostname", &taskview.RanOn{InstanceID: "i-0abc"}, map[string]string{MetaRanOnInstanceID: "i-0abc"}},
		{"hostname not ASCII", &taskview.RanOn{InstanceID: "i-0abc", Hostname: "hôte"}, map[string]string{MetaRanOnInstanceID: "i-0abc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ranOnMetadata(&state.TaskRecord{ID: "t1", RanOn: tc.ranOn})
			if !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
				t.Errorf("ranOnMetadata = %v, want %v", got, tc.want)
			}
		})
	}
}
