// Package eval holds the investigation scenarios (real failures of a Linux
// host, each with a catalog whose diagnostics print recorded fixture
// output, a scripted model and the ground truth) and the grader that
// scores a report against the truth. The scripted mode runs in CI
// (agent's TestInvestigationScenarios); scripts/investigate-eval runs the
// same scenarios against a real model.
package eval
