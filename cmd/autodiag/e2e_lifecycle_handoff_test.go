package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/harness"
)

// TestLifecycleHandoff20AgentsE2E: 20 agents share one lifecycle queue
// (sqs source) and one Redis. Ten of their instances are terminated one
// after another; each notice reaches its agent through whichever agent
// receives it (handed over through Redis, then deleted), so the target
// starts its drain within 2 s of the notice, the notice is delivered once
// and no agent ever makes it visible again, and each action is completed
// exactly once.
func TestLifecycleHandoff20AgentsE2E(t *testing.T) {
	const agents, targets = 20, 10
	const maxDelay = 2 * time.Second
	l := lcNewLab(t, lcLabOptions{notify: true, hookTTL: 5 * time.Minute})
	ids := make([]string, agents)
	for i := range ids {
		ids[i] = fmt.Sprintf("i-%017x", 0xa0000+i)
		if err := l.asg.AddInstance(lcLabASG, ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	procs := make([]*proc, agents)
	for i, id := range ids {
		procs[i] = startProc(t, fmt.Sprintf(`
instance_id: %s
admin_addr: 127.0.0.1:0
workers: 1
queue:
  url: %s
redis:
  url: redis://%s/0
  prefix: %q
lifecycle:
  sources: [sqs]
  queue_url: %s
  hook_name: %s
  hook_heartbeat_timeout: 5m
  heartbeat_interval: 30s
  drain_timeout: 1m
`, id, l.taskQURL, l.redis, l.prefix, l.lcQURL, lcLabHook), l.env()...)
	}
	rc := redis.NewClient(&redis.Options{Addr: l.redis})
	defer rc.Close()
	// Every agent is in the instance registry, so a notice can be handed
	// to any of them.
	eventually(t, 15*time.Second, "every agent in the instance registry", func() bool {
		n, err := rc.ZCount(context.Background(), l.prefix+"instances",
			"("+strconv.FormatInt(time.Now().UnixMilli(), 10), "+inf").Result()
		return err == nil && n == agents
	})

	// Targets spread over the fleet; one notice at a time, each waited for.
	var delays []time.Duration
	var tokens []string
	var targetIdx []int
	start := time.Now()
	for k := range targets {
		i := (k*7 + 3) % agents
		var prev *proc
		if k > 0 {
			prev = procs[targetIdx[k-1]]
		}
		lcHandoffSteady(t, l, prev, agents-k)
		targetIdx = append(targetIdx, i)
		sent := time.Now()
		acts, err := l.asg.Terminate(ids[i])
		if err != nil || len(acts) != 1 {
			t.Fatalf("terminate %s: %v (%d actions)", ids[i], err, len(acts))
		}
		tokens = append(tokens, acts[0].Token)
		if !harness.Until(10*time.Second, func() bool { return len(procs[i].logs("drain started")) > 0 }) {
			t.Fatalf("%s (notice %d) logged no \"drain started\" within 10 s; %s", ids[i], k+1, lcNoticeFate(l, lcLastNotice(l)))
		}
		at, line := lcFirstLog(t, procs[i], "drain started")
		if src, _ := line["source"].(string); src != "sqs" {
			t.Errorf("%s: drain source %q; want sqs", ids[i], src)
		}
		d := at.Sub(sent)
		delays = append(delays, d)
		if d > maxDelay {
			t.Errorf("%s started its drain %s after its notice; want within %s; %s", ids[i], d, maxDelay, lcNoticeFate(l, lcLastNotice(l)))
		}
	}
	window := time.Since(start)

	for _, i := range targetIdx {
		if code := procs[i].wait(30 * time.Second); code != 0 {
			t.Errorf("%s exited %d; want 0", ids[i], code)
		}
	}
	for k, i := range targetIdx {
		a, ok := l.asg.Action(ids[i])
		if !ok || a.Token != tokens[k] || a.Completions != 1 || a.Result != "CONTINUE" {
			t.Errorf("%s's action %+v; want completed once with CONTINUE", ids[i], a)
		}
	}

	// Every notice: one delivery, deleted, never made visible again.
	var noticeIDs []string
	for _, c := range l.sqs.Calls("SendMessage") {
		if c.Queue == lcNotifyQueue {
			noticeIDs = append(noticeIDs, c.MessageIDs...)
		}
	}
	if len(noticeIDs) != targets {
		t.Fatalf("%d notices sent; want %d", len(noticeIDs), targets)
	}
	handleOf := map[string]string{} // receipt handle -> message id
	receiveCalls := 0
	for _, c := range l.sqs.Calls("ReceiveMessage") {
		if c.Queue != lcNotifyQueue {
			continue
		}
		if !c.Time.Before(start) && c.Time.Before(start.Add(window)) {
			receiveCalls++
		}
		for j, h := range c.ReceiptHandles {
			handleOf[h] = c.MessageIDs[j]
		}
	}
	released := map[string]int{}
	for _, c := range l.sqsRec.log("ChangeMessageVisibility", lcNotifyQueue) {
		var in struct {
			ReceiptHandle     string
			VisibilityTimeout int
		}
		if err := json.Unmarshal(c.Body, &in); err != nil {
			t.Fatal(err)
		}
		if in.VisibilityTimeout == 0 {
			released[handleOf[in.ReceiptHandle]]++
		}
	}
	v, _ := l.sqs.Queue(lcNotifyQueue)
	deliveries := 0
	for _, h := range v.History {
		if !slices.Contains(noticeIDs, h.ID) {
			continue
		}
		deliveries += h.ReceiveCount
		if h.ReceiveCount != 1 || h.State != "deleted" || released[h.ID] != 0 {
			t.Errorf("notice %s: %d deliveries, %s, released %d times; want 1 delivery, deleted, never released",
				h.ID, h.ReceiveCount, h.State, released[h.ID])
		}
	}
	// Each notice reached its agent either directly (its own receive) or
	// handed over by the one agent that received it.
	handed := 0
	for _, p := range procs {
		handed += len(p.logs("lifecycle notice handed to its instance's agent"))
	}
	viaHandoff := 0
	for _, i := range targetIdx {
		if r, _ := procs[i].logs("drain started")[0]["reason"].(string); strings.Contains(r, "handed over by another agent") {
			viaHandoff++
		}
	}
	if handed != viaHandoff || handed == 0 {
		t.Errorf("%d notices handed over, %d drains started from a handed notice; want the same, at least one", handed, viaHandoff)
	}
	slices.Sort(delays)
	t.Logf("%d agents, %d notices: drain started after the notice p50 %s p99 %s max %s; deliveries per notice %.2f; "+
		"lifecycle-queue ReceiveMessage calls while the notices were out: %d (%.1f per notice, %d agents long-polling); handed over by the agent that received them: %d (the rest received by their own agent)",
		agents, targets, lcMS(lcPercentile(delays, 50)), lcMS(lcPercentile(delays, 99)), lcMS(delays[len(delays)-1]),
		float64(deliveries)/float64(targets), receiveCalls, float64(receiveCalls)/float64(targets), agents, handed)
}

// lcPercentile is the p-th percentile (nearest rank) of sorted ds.
func lcPercentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	r := (p*len(ds) + 99) / 100
	return ds[max(r, 1)-1]
}

// lcHandoffSteady waits, before the next notice, for the fleet the
// 2 s claim is about: the previous target (prev, nil before the first
// notice) has exited and the lifecycle queue holds exactly one long poll
// per agent still running. A target whose
// notice was handed over abandons its own poll NotificationReceiveGrace
// after its trigger (lifecycle.Run), and SQS answers an abandoned poll
// until it sees the connection close: a notice sent in that instant goes to
// no one and stays hidden for the queue's visibility timeout (30 s), as it
// would in a fleet where one instance drains while another's notice comes.
// Every open poll ends within its WaitTimeSeconds (lifecycle's sqsWaitTime,
// 20 s), so that bounds the wait for the count.
func lcHandoffSteady(t *testing.T, l *lcLab, prev *proc, running int) {
	t.Helper()
	if prev != nil {
		if code := prev.wait(30 * time.Second); code != 0 {
			t.Errorf("the previous target exited %d; want 0", code)
		}
	}
	const sqsWaitTime = 20 * time.Second
	eventually(t, sqsWaitTime, fmt.Sprintf("%d lifecycle-queue polls, one per running agent", running), func() bool {
		return l.sqs.Pollers(lcNotifyQueue) == running
	})
}

// lcLastNotice is the id of the last message sent to the lifecycle queue.
func lcLastNotice(l *lcLab) string {
	id := ""
	for _, c := range l.sqs.Calls("SendMessage") {
		if c.Queue == lcNotifyQueue && len(c.MessageIDs) > 0 {
			id = c.MessageIDs[len(c.MessageIDs)-1]
		}
	}
	return id
}

// lcNoticeFate says what became of lifecycle-queue message id: its state
// in the fake and every ReceiveMessage that returned it, with when that
// request came and went and whether its client was still there.
func lcNoticeFate(l *lcLab, id string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "notice %s:", id)
	if v, ok := l.sqs.Queue(lcNotifyQueue); ok {
		for _, h := range v.History {
			if h.ID == id {
				fmt.Fprintf(&b, " %s, received %d times, visible at %s;", h.State, h.ReceiveCount, h.VisibleAt.Format(time.RFC3339Nano))
			}
		}
	}
	byInv := map[string]lcCall{}
	for _, c := range l.sqsRec.log("ReceiveMessage", lcNotifyQueue) {
		byInv[c.Invocation] = c
	}
	for _, c := range l.sqs.Calls("ReceiveMessage") {
		if c.Queue != lcNotifyQueue || !slices.Contains(c.MessageIDs, id) {
			continue
		}
		h := byInv[c.InvocationID]
		fmt.Fprintf(&b, " returned by the ReceiveMessage from %s that came at %s and ended at %s (status %d, client gone %v);",
			h.Remote, h.Start.Format(time.RFC3339Nano), h.End.Format(time.RFC3339Nano), h.Status, h.Gone)
	}
	fmt.Fprintf(&b, " %d lifecycle-queue polls open now", l.sqs.Pollers(lcNotifyQueue))
	return b.String()
}
