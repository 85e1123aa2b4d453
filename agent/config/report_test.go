package config

import (
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/investigate"
	"github.com/autodiag/autodiag/agent/report"
)

// TestReportSectionValidatesInvestigate: the report: section's problems
// under investigate: name their key and line, the investigate package's
// own bounds and the one that needs the provider (bedrock has no
// json_schema answer) alike.
func TestReportSectionValidatesInvestigate(t *testing.T) {
	tests := []struct {
		name, yaml, key string
		line            int
	}{
		{"max_steps", "report:\n  investigate:\n    max_steps: 99\n", "report.investigate.max_steps", 3},
		{"bedrock json_schema", "report:\n  provider: bedrock\n  investigate:\n    answer: json_schema\n", "report.investigate.answer", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantProblemAt(t, tt.yaml, tt.key, tt.line) })
	}
}

// TestReportSectionJobLease: an investigation's wall time lengthens the
// report jobs' lease; without one it is the single-shot report's.
func TestReportSectionJobLease(t *testing.T) {
	s := ReportSection{Config: report.DefaultConfig()}
	s.Timeout = 4 * time.Minute
	if got, want := s.JobLease(), 2*s.Timeout; got != want {
		t.Errorf("single-shot lease %s, want %s", got, want)
	}
	s.Investigate = &investigate.Config{WallTime: 10 * time.Minute}
	if got, want := s.JobLease(), 2*(s.Timeout+10*time.Minute); got != want {
		t.Errorf("investigation lease %s, want %s", got, want)
	}
}
