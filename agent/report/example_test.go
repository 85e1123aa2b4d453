package report_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/agent/taskview"
	"github.com/autodiag/autodiag/internal/fake/openaifake"
	"github.com/autodiag/autodiag/limiter"
)

// Example wires a Reporter the way the agent does in embedded mode: the
// memory queue and limiter backend (in a fleet: report.NewRedisQueue and
// limiter.NewRedis on the same Redis), an OpenAI-compatible provider, and
// a Sink that would write the record and the `report` event.
func Example() {
	fake := openaifake.New() // stands in for e.g. http://vllm.internal:8000/v1
	defer fake.Close()

	cfg := report.DefaultConfig()
	cfg.Enabled, cfg.Provider, cfg.Model = true, report.ProviderOpenAI, "llama3.1:8b"
	cfg.BaseURL, cfg.APIKeyEnv = fake.BaseURL(), "REPORT_API_KEY"

	lim, _ := limiter.New(cfg.LimiterConfig(false), limiter.NewMemory(), limiter.Options{})
	done := make(chan report.Result, 1)
	r, err := report.New(report.Options{
		Config:   cfg,
		Provider: report.NewOpenAI(cfg.BaseURL, "the key from $REPORT_API_KEY", &http.Client{}),
		Queue:    report.NewMemoryQueue(cfg.JobLease(0), nil),
		Limiter:  lim,
		Sink: report.SinkFunc(func(_ context.Context, j report.Job, res report.Result) error {
			done <- res
			return nil
		}),
		Consumer: "i-0123456789abcdef0",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = r.Run(context.Background()) }()

	code := 1
	if cfg.Wants("failed") {
		_ = r.Enqueue(context.Background(), report.Job{ID: "task-1", Evidence: report.Evidence{
			Alert:      report.EvidenceAlert{Alert: taskview.Alert{Source: "alertmanager", Name: "DiskFull"}, Severity: "critical"},
			Diagnostic: "disk", Argv: []string{"df", "-h"}, Host: "10.0.0.1",
			ExitCode: &code, Outcome: "failed", Output: "/dev/xvda1 8G 8G 0 100% /\n",
		}})
	}
	res := <-done
	fmt.Println(res.Status, res.Confidence)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // the drain deadline
	defer cancel()
	fmt.Println(r.Stop(ctx))
	// Output:
	// ok likely
	// <nil>
}
