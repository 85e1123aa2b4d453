package state_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/autodiag/autodiag/agent/queue"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// TestRedisSQSExactlyOnce drives the two backends the way a fleet does,
// without the agent: 3 agents (each 3 workers, one Redis store and one SQS
// source apiece) share a queue on which every task is sent twice. Each id
// must run exactly once, every message must be deleted and nothing may be
// left in flight.
//
// Each agent keeps a local set of the ids it is running: a same-owner Claim
// of a live lease is Claimed again (Store semantics, kept for restarts), so
// without that set a duplicate delivered to the agent already running the
// task would run it twice.
func TestRedisSQSExactlyOnce(t *testing.T) {
	c := redisClients(t)["standalone"]
	prefix := uniquePrefix(t, c)
	srv, ts := sqsfake.NewTestServer(t)
	client := sqs.NewFromConfig(sqsfake.SDKConfig(ts.URL))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	created, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("tasks")})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(created.QueueUrl)

	const tasks = 150
	for i := range tasks {
		body := fmt.Sprintf(`{"id":"evt-%d"}`, i)
		for range 2 {
			if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
				t.Fatal(err)
			}
		}
	}

	var (
		mu       sync.Mutex
		executed = map[string]int{}
		acked    int
	)
	allDone := make(chan struct{})
	ack := func() {
		mu.Lock()
		defer mu.Unlock()
		acked++
		if acked == 2*tasks {
			close(allDone)
		}
	}

	type agent struct {
		id      string
		src     *queue.SQS
		store   state.Store
		mu      sync.Mutex
		running map[string]bool
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
		cancel()
	}
	for a := range 3 {
		ag := &agent{
			id:      fmt.Sprintf("i-%d", a),
			src:     queue.NewSQS(client, queue.SQSOptions{QueueURL: url, WaitTime: time.Second, VisibilityTimeout: 30 * time.Second}),
			store:   state.NewRedis(c, state.RedisOptions{Prefix: prefix}),
			running: map[string]bool{},
		}
		defer ag.src.Close(context.Background())
		for range 3 {
			wg.Go(func() {
				for ctx.Err() == nil {
					ms, err := ag.src.Receive(ctx, 1)
					if err != nil {
						if ctx.Err() == nil {
							fail(err)
						}
						return
					}
					for _, m := range ms {
						var body struct{ ID string }
						if err := json.Unmarshal(m.Body, &body); err != nil {
							fail(err)
							return
						}
						ag.mu.Lock()
						mine := ag.running[body.ID]
						ag.running[body.ID] = true
						ag.mu.Unlock()
						if mine { // a duplicate of what this agent runs now
							_ = ag.src.ChangeVisibility(ctx, m, time.Second)
							continue
						}
						cl, err := ag.store.Claim(ctx, state.TaskRecord{ID: body.ID}, ag.id, time.Minute)
						if err != nil {
							fail(err)
							return
						}
						switch cl.Result {
						case state.Claimed:
							mu.Lock()
							executed[body.ID]++
							mu.Unlock()
							rec := cl.Record
							rec.Outcome = "succeeded"
							if err := ag.store.Finish(ctx, rec, state.FinishExtras{}); err != nil {
								fail(err)
								return
							}
							fallthrough
						case state.AlreadyDone:
							if err := ag.src.Delete(ctx, m); err != nil {
								fail(err)
								return
							}
							ack()
						case state.HeldElsewhere:
							// Look again soon rather than after the whole lease.
							_ = ag.src.ChangeVisibility(ctx, m, time.Second)
						}
						ag.mu.Lock()
						delete(ag.running, body.ID)
						ag.mu.Unlock()
					}
				}
			})
		}
	}
	select {
	case <-allDone:
	case <-ctx.Done():
	case <-time.After(60 * time.Second):
		t.Error("not every message was acknowledged within 60s")
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	for i := range tasks {
		id := fmt.Sprintf("evt-%d", i)
		if executed[id] != 1 {
			t.Errorf("%s executed %d times", id, executed[id])
		}
		rec, ok, err := state.NewRedis(c, state.RedisOptions{Prefix: prefix}).Task(context.Background(), id)
		if err != nil || !ok || rec.Status != state.StatusDone || rec.Attempts != 1 {
			t.Errorf("%s record = %+v (ok %v, err %v), want done with attempts 1", id, rec, ok, err)
		}
	}
	v, _ := srv.Queue("tasks")
	if !v.Empty() || v.Stats.Deleted != 2*tasks {
		t.Errorf("queue: %d visible, %d in flight, %d deleted of %d", v.Visible, v.InFlight, v.Stats.Deleted, 2*tasks)
	}
	for a := range 3 {
		if es, err := state.NewRedis(c, state.RedisOptions{Prefix: prefix}).Inflight(context.Background(), fmt.Sprintf("i-%d", a)); err != nil || len(es) != 0 {
			t.Errorf("Inflight(i-%d) = %v, %v; want none", a, es, err)
		}
	}
}
