// Package agenttest opens an agent the way `autodiag run` does, with every
// optional metric family switched on, and lists the metric families it
// registers: what the tests that hold the dashboard, the alert rules and
// the metrics reference page against the code (deploy, docs) share.
package agenttest
