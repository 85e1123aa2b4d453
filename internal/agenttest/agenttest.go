package agenttest

import (
	"context"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/agent"
	"github.com/autodiag/autodiag/agent/config"
)

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// RegisteredNames lists the metric families registered on reg, from the
// descriptors its collectors announce. Unlike a scrape, this sees a vector
// that has no child yet: /metrics shows a family only once some label
// values were used, and most of the agent's vectors (lifecycle results,
// limiter reasons, outcomes) get theirs only when that event happens.
func RegisteredNames(t *testing.T, reg *prometheus.Registry) map[string]bool {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	names := map[string]bool{}
	for d := range ch {
		// Desc has no accessor for its name; its String form is
		// Desc{fqName: "…", help: …}.
		m := descName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names[m[1]] = true
	}
	return names
}

// OpenFull opens an agent the way `autodiag run` does, with every
// optional metric family switched on: an sqs lifecycle source (the
// lifecycle counters exist only with one), a notification sink (the
// dispatcher's metrics) and root-cause reports (the report metrics). Open
// makes no network call for this config: the instance id is given, Redis
// is not configured (the in-memory store still registers
// autodiag_redis_up), the sink is called only when there is something to
// say and AWS clients connect on first use.
func OpenFull(t *testing.T) *agent.Agent {
	t.Helper()
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	cfg, err := config.Load([]byte(`
instance_id: i-0123456789abcdef0
lifecycle:
  sources: [signal, sqs]
  queue_url: https://sqs.us-east-1.amazonaws.com/123456789012/autodiag-lifecycle
  hook_name: autodiag-drain
  asg_name: fleet
notify:
  - name: incident-api
    type: webhook
    url: https://hooks.example.com/autodiag
    on: [failed, report, drain_failed]
report:
  enabled: true
  provider: bedrock
  model: amazon.nova-lite-v1:0
  investigate: {daily_cost_usd: 20}
results:
  s3: {bucket: diag-out, prefix: autodiag}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	a, closeAgent, err := agent.Open(ctx, cfg, agent.OpenOptions{})
	if err != nil {
		t.Fatalf("agent.Open: %v", err)
	}
	t.Cleanup(closeAgent)
	return a
}
