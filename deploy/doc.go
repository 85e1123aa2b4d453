// Package deploy holds what it takes to run autodiag on an EC2 Auto Scaling
// fleet, and the tests that keep those artifacts honest.
//
// The artifacts are not Go:
//
//   - terraform/modules/autodiag: task queue and dead-letter queue, the
//     EC2_INSTANCE_TERMINATING lifecycle hook, the optional lifecycle
//     notification queue, a least-privilege instance role, and CloudWatch
//     alarms on stuck drains (DrainSeconds from the agent, and
//     GroupTerminatingInstances, which needs no agent), DLQ depth, queue
//     age and limiter degradation;
//   - terraform/examples/fleet: a launch template and Auto Scaling group that
//     install the agent with user data and call the module;
//   - systemd/autodiag.service: the hardened Type=notify unit, whose stop
//     timeout outlasts the drain and whose restart policy follows the
//     agent's exit statuses;
//   - config/example.yaml: a production-like agent configuration;
//   - grafana/autodiag.json and prometheus/autodiag-rules.yml: the fleet
//     dashboard and the alerting and recording rules (promtool unit tests
//     in prometheus/autodiag-rules_test.yml, run by scripts/test.sh).
//
// The tests parse every .tf file with hashicorp/hcl, check that variables are
// documented and typed, that the example passes exactly the module's inputs,
// that IAM policy documents grant no wildcard action and no wildcard resource
// on a mutating action, the exact grants of each role, that the systemd
// TimeoutStopSec exceeds the configured drain timeout, that the unit restarts
// exactly the exit statuses it must, that the drain-stuck threshold lies
// between the longest healthy drain and the longest an agent with a failing
// completion publishes DrainSeconds (nesting_test.go, with the agent's
// constants read from its source), and that user data is bounded, marks a
// failed install unhealthy and carries no Redis URL. Broken fixtures under testdata/ prove each check
// rejects what it must. When a terraform (or tofu) binary is on PATH the tests
// also run `terraform fmt -check`; with AUTODIAG_TF_PLUGIN_DIR pointing at a
// provider mirror they run `terraform validate` and `terraform test` (the
// tests/*.tftest.hcl files, against a mocked AWS provider) offline.
// pictures_test.go opens an agent and fails when the dashboard or the rules
// name a metric it does not register.
//
// The package has no exported API; operators read the README's Operations section.
package deploy
