package main

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/lifecycle"
)

// TestLifecycleAbandonLaunchE2E: `autodiag lifecycle abandon-launch`, what
// user data runs when an install fails, ends the instance's launching
// action with ABANDON through the Auto Scaling API (the fake, driven by the
// real SDK client) — no aws CLI; a second run finds no active action and
// succeeds; without launch_hook_name it is a usage error.
func TestLifecycleAbandonLaunchE2E(t *testing.T) {
	const group, hook, id = "fleet", "fleet-launch", "i-0abc00000000000b7"
	fake := asgfake.New(asgfake.Options{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	fake.AddGroup(group)
	if err := fake.PutHook(asgfake.Hook{Group: group, Name: hook, Transition: asgfake.TransitionLaunching,
		HeartbeatTimeout: 600 * time.Second, DefaultResult: asgfake.ResultAbandon}); err != nil {
		t.Fatal(err)
	}
	if _, err := fake.Launch(group, id, asgfake.PlaceGroup); err != nil {
		t.Fatal(err)
	}
	env := []string{"AWS_ENDPOINT_URL_AUTO_SCALING=" + srv.URL, "AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret",
		"AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true"}
	cfg := writeConfig(t, fmt.Sprintf("instance_id: %s\nlifecycle:\n  sources: [signal]\n  asg_name: %s\n  launch_hook_name: %s\n", id, group, hook))
	bound := lifecycle.DefaultCompleteTimeout + 5*time.Second

	code, stdout, stderr := runCLIWithin(t, bound, env, "lifecycle", "abandon-launch", "--config", cfg)
	if code != exitOK || !strings.Contains(stdout, "ABANDON") {
		t.Fatalf("abandon-launch: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	act, ok := fake.Action(id)
	if !ok || !act.Ended || act.EndReason != asgfake.EndCompleted || act.Result != asgfake.ResultAbandon || act.Completions != 1 {
		t.Fatalf("launching action %+v; want completed once with ABANDON", act)
	}
	if code, _, stderr := runCLIWithin(t, bound, env, "lifecycle", "abandon-launch", "--config", cfg); code != exitOK {
		t.Fatalf("second abandon-launch (no active action): exit %d: %s", code, stderr)
	}
	noHook := writeConfig(t, fmt.Sprintf("instance_id: %s\n", id))
	if code, _, stderr := runCLIWithin(t, bound, env, "lifecycle", "abandon-launch", "--config", noHook); code != exitUsage ||
		!strings.Contains(stderr, "launch_hook_name") {
		t.Fatalf("without launch_hook_name: exit %d %s; want 2 naming the key", code, stderr)
	}
}
