package agent

import (
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/config"
)

// TestURLSecretIsFleetMode: a Redis named by a secret is a Redis (not
// embedded mode) and needs the AWS configuration to be read.
func TestURLSecretIsFleetMode(t *testing.T) {
	var c config.Config
	c.Redis.URLSecret = "/autodiag/redis-url"
	if c.Embedded() || !c.NeedsAWS() || !c.HasRedis() {
		t.Fatalf("Embedded, needsAWS, hasRedis = %v, %v, %v; want false, true, true", c.Embedded(), c.NeedsAWS(), c.HasRedis())
	}
}

// TestLaunchHookNeedsInstanceAndActor: a launch hook is completed by
// instance id through Auto Scaling, with the signal source alone too: the
// config needs an EC2 instance id, and Open builds the Actor.
func TestLaunchHookNeedsInstanceAndActor(t *testing.T) {
	cfg, err := config.Load([]byte(testConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Lifecycle.LaunchHookName = "launch"
	if !cfg.NeedsEC2InstanceID() || !cfg.NeedsActor() || !cfg.NeedsAWS() {
		t.Fatalf("NeedsEC2InstanceID, needsActor, needsAWS = %v, %v, %v; want true", cfg.NeedsEC2InstanceID(), cfg.NeedsActor(), cfg.NeedsAWS())
	}
	cfg.InstanceID = "web-1"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "instance_id") {
		t.Fatalf("Validate with a hostname as instance_id = %v; want an instance_id error", err)
	}
}
