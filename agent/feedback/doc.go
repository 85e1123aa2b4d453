// Package feedback records responders' verdicts on root-cause reports
// (good or wrong, once per person and task) and turns them into the
// per-category precision table of `autodiag report-stats`: the first
// measure of the investigator in production that is not a benchmark.
//
// A verdict is kept with the task (for the record's TTL) and appended to
// a capped log that the table is computed from; in Redis in fleet mode,
// in memory in embedded mode.
package feedback
