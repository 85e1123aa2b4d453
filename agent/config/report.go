package config

import (
	"errors"
	"time"

	"github.com/autodiag/autodiag/agent/investigate"
	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/internal/configerr"
)

// ReportSection is the report: section: the single-shot report's keys
// (report.Config) and, under investigate:, the investigation's
// (investigate.Config), which the investigate package owns because it
// builds on the report.
type ReportSection struct {
	report.Config `yaml:",inline"`
	// Investigate, when set, lets the report run more diagnostics as
	// tasks; nil is the single-shot report.
	Investigate *investigate.Config `yaml:"investigate"`
}

// Validate reports every problem of the section, keys relative to it.
func (s ReportSection) Validate() error {
	errs := []error{s.Config.Validate()}
	if s.Investigate != nil {
		errs = append(errs, s.Investigate.Validate())
		if s.Provider == report.ProviderBedrock && s.Investigate.Answer == investigate.AnswerJSONSchema {
			errs = append(errs, configerr.Errorf("investigate.answer", "%q is for provider %q; bedrock answers through the %s tool",
				investigate.AnswerJSONSchema, report.ProviderOpenAI, report.AnswerToolName))
		}
	}
	return errors.Join(errs...)
}

// JobLease is the queue lease for report jobs (report.Config.JobLease),
// with an investigation's wall time when there is one.
func (s ReportSection) JobLease() time.Duration {
	if s.Investigate != nil {
		return s.Config.JobLease(s.Investigate.WithDefaults().WallTime)
	}
	return s.Config.JobLease(0)
}
