package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/cwfake"
)

// TestDrainSecondsWhileCompletionThrottledE2E: the binary, its SDK clients
// pointed at the Auto Scaling and CloudWatch fakes. Auto Scaling throttles
// every CompleteLifecycleAction for longer than drain_timeout; DrainSeconds
// keeps being published, with values past drain_timeout, so the stuck-drain
// alarm can fire. Once completion succeeds the agent exits 0 and publishes
// nothing more. LimiterDegraded is published too, its group learnt from
// Auto Scaling since lifecycle.asg_name is not set.
func TestDrainSecondsWhileCompletionThrottledE2E(t *testing.T) {
	const (
		drainTimeout = time.Second
		interval     = 200 * time.Millisecond
	)
	l := lcNewLab(t, lcLabOptions{scale: 10, hookTTL: 30 * time.Second, notify: true})
	cw, cts := cwfake.NewTestServer(t)
	l.asg.InjectFault(asgfake.Fault{Op: "CompleteLifecycleAction", Code: "Throttling"})

	cfg := l.config(2, "  sources: [signal, sqs]\n  queue_url: "+l.lcQURL+"\n  hook_name: "+lcLabHook+
		"\n  heartbeat_interval: 250ms\n  drain_timeout: "+drainTimeout.String()+"\n")
	// No task runs here: the catalog's timeout only has to fit the drain.
	cfg = strings.NewReplacer("  namespace: autodiag-e2e\n", "  namespace: autodiag-e2e\n  interval: "+interval.String()+"\n",
		"    timeout: 1m\n", "    timeout: "+drainTimeout.String()+"\n").Replace(cfg)
	// The last value of a variable wins: CloudWatch goes to cwfake.
	p := startProc(t, cfg, append(l.env(), "AWS_ENDPOINT_URL_CLOUDWATCH="+cts.URL)...)
	eventually(t, 30*time.Second, "the agent polling the lifecycle queue", func() bool { return l.sqs.Pollers(lcNotifyQueue) > 0 })
	if _, err := l.asg.Terminate(lcMockInstance); err != nil {
		t.Fatal(err)
	}

	// Twice drain_timeout: the drain's own bound is long past, only the
	// completion holds the instance.
	past := 2 * drainTimeout.Seconds()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cw.Wait(ctx, func(data []cwfake.Datum) bool {
		for _, d := range cwfake.Named(data, "DrainSeconds") {
			if d.Value > past {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("no DrainSeconds above %.1fs: %v", past, err)
	}
	if n := l.asg.Count("CompleteLifecycleAction", "ok"); n != 0 {
		t.Fatalf("%d completions succeeded while every one was throttled", n)
	}
	if len(l.asgRec.log("CompleteLifecycleAction", "")) == 0 {
		t.Fatal("no completion attempt yet: DrainSeconds past drain_timeout would not show a stuck completion")
	}
	l.asg.ClearFaults()
	if code := p.wait(60 * time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}

	var completed time.Time
	for _, c := range l.asgRec.log("CompleteLifecycleAction", "") {
		if c.Status == http.StatusOK {
			completed = c.End
		}
	}
	if completed.IsZero() {
		t.Fatal("no successful CompleteLifecycleAction")
	}
	drained, _ := lcFirstLog(t, p, "drained")
	ds := cwfake.Named(cw.Data(), "DrainSeconds")
	after, last := 0, -1.0
	for _, d := range ds {
		if asg, _ := d.Dimension("AutoScalingGroupName"); asg != lcLabASG || d.Unit != "Seconds" {
			t.Errorf("datum %+v: want group %s in Seconds", d, lcLabASG)
		}
		if d.Value < last {
			t.Errorf("DrainSeconds went down: %.3f after %.3f", d.Value, last)
		}
		last = d.Value
		if d.Received.After(drained) {
			t.Errorf("DrainSeconds %.3f received %s after the drained line", d.Value, lcMS(d.Received.Sub(drained)))
		}
		if d.Received.After(completed) {
			after++
		}
	}
	// One put may be on its way while the completion's answer comes back.
	if after > 1 {
		t.Errorf("%d DrainSeconds data after the completion succeeded, want at most the one in flight", after)
	}
	// lifecycle.asg_name is not set: the group comes from Auto Scaling.
	lim := cwfake.Named(cw.Data(), "LimiterDegraded")
	if len(lim) == 0 {
		t.Error("LimiterDegraded never published without lifecycle.asg_name")
	}
	for _, d := range lim {
		if asg, _ := d.Dimension("AutoScalingGroupName"); asg != lcLabASG {
			t.Errorf("LimiterDegraded for group %q, want %s", asg, lcLabASG)
		}
	}
	t.Logf("REPORT DrainSeconds: %d data, last %.2fs (drain_timeout %s), completion attempts %d",
		len(ds), last, drainTimeout, len(l.asgRec.log("CompleteLifecycleAction", "")))
}
