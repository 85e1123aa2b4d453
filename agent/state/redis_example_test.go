package state_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
)

// A duplicate delivery of a running task is not run twice, and a finished
// one is acknowledged without running again. (Needs a Redis server, so it is
// compiled but not run.)
func ExampleNewRedis() {
	ctx := context.Background()
	client := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:6379"}})
	store := state.NewRedis(client, state.RedisOptions{Prefix: "autodiag:"})

	rec := state.TaskRecord{ID: "evt-8812", Host: "web-01.prod.example.com", Diagnostic: "disk-usage"}
	c, err := store.Claim(ctx, rec, "i-0abc", 90*time.Second)
	if err != nil {
		return // the limiter's fail mode decides; the message stays on the queue
	}
	switch c.Result {
	case state.Claimed: // run it, renewing the lease while it runs
		done := c.Record
		done.Outcome, done.ExitCode = "succeeded", new(0)
		_ = store.Finish(ctx, done, state.FinishExtras{})
	case state.HeldElsewhere: // hide the message for c.LeaseRemaining
		fmt.Println("running elsewhere for", c.LeaseRemaining)
	case state.AlreadyDone: // delete the message
		fmt.Println("already", c.Record.Outcome)
	}
}
