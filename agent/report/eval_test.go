package report

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/config"
)

// TestReportEval sends the testdata corpus to a real provider and prints
// each report, for a person judging a model before enabling reports. It
// runs only when scripts/report-eval sets AUTODIAG_REPORT_EVAL_PROVIDER:
// it costs money and needs the network, so it is never part of CI.
func TestReportEval(t *testing.T) {
	provider := os.Getenv("AUTODIAG_REPORT_EVAL_PROVIDER")
	if provider == "" {
		t.Skip("AUTODIAG_REPORT_EVAL_PROVIDER not set: scripts/report-eval runs this against a real provider")
	}
	cfg := DefaultConfig()
	cfg.Enabled, cfg.Provider = true, provider
	if m := os.Getenv("AUTODIAG_REPORT_EVAL_MODEL"); m != "" {
		cfg.Model = m
	}
	cfg.BaseURL = os.Getenv("AUTODIAG_REPORT_EVAL_BASE_URL")
	cfg.APIKeyEnv = os.Getenv("AUTODIAG_REPORT_EVAL_API_KEY_ENV")
	if cfg.Provider == ProviderOpenAI && cfg.APIKeyEnv == "" {
		cfg.APIKeyEnv = "OPENAI_API_KEY"
	}
	cfg.Guardrail = Guardrail{ID: os.Getenv("AUTODIAG_REPORT_EVAL_GUARDRAIL_ID"), Version: os.Getenv("AUTODIAG_REPORT_EVAL_GUARDRAIL_VERSION")}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckEnv(os.LookupEnv); err != nil {
		t.Fatal(err)
	}
	var p Provider
	switch cfg.Provider {
	case ProviderBedrock:
		awsCfg, err := config.LoadDefaultConfig(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p = NewBedrock(awsCfg, cfg.Guardrail)
	case ProviderOpenAI:
		p = NewOpenAI(cfg.BaseURL, os.Getenv(cfg.APIKeyEnv), nil)
	}
	g := NewGenerator(cfg, p, nil, nil)
	ev := corpus(t)
	names := make([]string, 0, len(ev))
	for n := range ev {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		r := g.Generate(context.Background(), ev[n])
		fmt.Printf("\n===== %s: %s, confidence %q, %d+%d tokens, %.1fs, finish %q %s\n%s\n",
			n, r.Status, r.Confidence, r.InputTokens, r.OutputTokens, r.LatencyS, r.FinishReason, r.Reason, r.Markdown)
	}
}
