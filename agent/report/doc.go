// Package report writes a root-cause report for a finished diagnostic: a
// language model reads the alert, the diagnostic and the tail of its
// (already redacted) output and answers with a short Markdown report for an
// SRE, at low temperature and within a token and time budget.
//
// The pieces, each usable alone:
//
//   - Config is the `report:` section of the configuration file but for
//     its `investigate:` key, which is investigate.Config (the two meet
//     in config.ReportSection).
//   - BuildPrompt turns Evidence into the one prompt every provider gets;
//     the golden files in testdata are its reviewed text.
//   - Provider is one model endpoint: NewBedrock (Bedrock Converse) and
//     NewOpenAI (any OpenAI-compatible chat completions server).
//   - Generator asks a provider for one report, retrying throttling and
//     server errors inside Config.Timeout, and returns a Result.
//   - Reporter runs report jobs from a durable Queue (MemoryQueue in
//     embedded mode, RedisQueue in a fleet) on its own workers, after a
//     limiter decision, and hands each Result to a Sink.
//
// A report never changes a task's outcome: everything that goes wrong ends
// in a Result with Status failed, rate_limited or skipped and a Reason.
package report
