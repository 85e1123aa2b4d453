package main

import (
	"maps"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// TestSQSKinds: the task queue's calls are counted by kind (a receive
// with messages apart from an empty one; the lifecycle queue's, the
// generator's sends and the calls before the first task left out), and
// a batch's call is shared among its messages' tasks: a delete of one
// no_agent_for_host task's message and another's counts half to it. A
// delete or visibility change finds its messages by the receipt handles
// that a receive returned, also a receive before the first task.
func TestSQSKinds(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	r := &fleetRun{t0: t0, msgTask: map[string]string{"m1": "t1", "m2": "t2"}}
	calls := []sqsfake.Call{
		{Time: t0.Add(-time.Second), Op: "ReceiveMessage", Queue: "tasks", N: 1, MessageIDs: []string{"m2"}, ReceiptHandles: []string{"h0"}},
		{Time: t0, Op: "SendMessageBatch", Queue: "tasks", N: 2},
		{Time: t0.Add(time.Second), Op: "ReceiveMessage", Queue: "tasks", N: 2, MessageIDs: []string{"m1", "m2"}, ReceiptHandles: []string{"h1", "h2"}},
		{Time: t0.Add(time.Second), Op: "ReceiveMessage", Queue: "tasks"},
		{Time: t0.Add(time.Second), Op: "ReceiveMessage", Queue: "lifecycle"},
		{Time: t0.Add(2 * time.Second), Op: "ChangeMessageVisibility", Queue: "tasks", N: 1, ReceiptHandles: []string{"h1"}},
		{Time: t0.Add(3 * time.Second), Op: "DeleteMessageBatch", Queue: "tasks", N: 2, ReceiptHandles: []string{"h1", "h0"}},
	}
	r.sqsTaskCalls = taskQueueCalls(calls, "tasks", r.t0, r.msgTask)
	k := countSQSKinds([]endedLine{{id: "t1", outcome: "rejected", reason: "no_agent_for_host"}, {id: "t2", outcome: "released", reason: "drain"}}, r.sqsTaskCalls, r.sqsAt.Sub(r.t0))
	wantKinds := map[string]int{"ReceiveMessage (messages)": 1, "ReceiveMessage (empty)": 1, "ChangeMessageVisibility": 1, "DeleteMessageBatch": 1}
	wantShare := map[string]float64{"ReceiveMessage (messages)": 0.5, "ChangeMessageVisibility": 1, "DeleteMessageBatch": 0.5}
	if !maps.Equal(k.ByKind, wantKinds) || !maps.Equal(k.NoAgent, wantShare) || k.NoAgentTasks != 1 || !maps.Equal(k.Released, map[string]int{"drain": 1}) {
		t.Errorf("kinds %v, no_agent_for_host shares %v (%d tasks), released %v; want %v, %v (1 task), drain 1", k.ByKind, k.NoAgent, k.NoAgentTasks, k.Released, wantKinds, wantShare)
	}
}
