package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/autodiag/autodiag/internal/harness"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

// sqsCall is one of the agents' calls on the task queue: its kind (the
// operation; a ReceiveMessage is "ReceiveMessage (messages)" or
// "ReceiveMessage (empty)") and the tasks of the messages it received,
// deleted or changed.
type sqsCall struct {
	kind  string
	tasks []string
}

// taskQueueCalls are the agents' calls on queue since the first task was
// sent (the generator's SendMessageBatch left out), each with the tasks it
// touched: a receive names its messages, a delete or visibility change
// the receipt handles a receive returned.
func taskQueueCalls(calls []sqsfake.Call, queue string, t0 time.Time, msgTask map[string]string) []sqsCall {
	handleMsg := map[string]string{}
	var out []sqsCall
	for _, c := range calls {
		if c.Queue != queue || c.Op == "SendMessageBatch" {
			continue
		}
		if c.Op == "ReceiveMessage" {
			for i, h := range c.ReceiptHandles {
				if i < len(c.MessageIDs) {
					handleMsg[h] = c.MessageIDs[i]
				}
			}
		}
		if c.Time.Before(t0) {
			continue
		}
		sc := sqsCall{kind: c.Op}
		switch {
		case c.Op == "ReceiveMessage" && c.N == 0:
			sc.kind = "ReceiveMessage (empty)"
		case c.Op == "ReceiveMessage":
			sc.kind = "ReceiveMessage (messages)"
			for _, id := range c.MessageIDs {
				sc.tasks = append(sc.tasks, msgTask[id])
			}
		default:
			for _, h := range c.ReceiptHandles {
				sc.tasks = append(sc.tasks, msgTask[handleMsg[h]])
			}
		}
		out = append(out, sc)
	}
	return out
}

// sqsKinds is the breakdown of the agents' calls on the task queue by kind:
// all of them, and the share that went to tasks that ended rejected
// no_agent_for_host (the tasks of killed hosts, each waiting
// queue.target_wait for an agent that might come back; a batch's call is
// shared evenly among its messages).
type sqsKinds struct {
	ByKind  map[string]int     `json:"calls_by_kind"`
	NoAgent map[string]float64 `json:"no_agent_for_host_share_by_kind"`
	// NoAgentTasks counts the tasks that ended no_agent_for_host, and
	// Span is the time the calls were counted over.
	NoAgentTasks int     `json:"no_agent_for_host_tasks"`
	SpanSeconds  float64 `json:"span_seconds"`
	// Released counts the released outcomes logged by reason: each is a
	// visibility change and a message that comes back to be received
	// again.
	Released map[string]int `json:"released_by_reason"`
}

// countSQSKinds sorts the task queue's calls, counted over span, by kind,
// and shares each no_agent_for_host task's calls among its messages.
func countSQSKinds(lines []endedLine, calls []sqsCall, span time.Duration) sqsKinds {
	noAgent := map[string]bool{}
	released := map[string]int{}
	for _, l := range lines {
		if l.outcome == "released" {
			released[l.reason]++
		}
		if l.outcome == "rejected" && l.reason == "no_agent_for_host" {
			noAgent[l.id] = true
		}
	}
	k := sqsKinds{ByKind: map[string]int{}, NoAgent: map[string]float64{}, NoAgentTasks: len(noAgent), Released: released, SpanSeconds: span.Round(time.Second).Seconds()}
	for _, c := range calls {
		k.ByKind[c.kind]++
		if len(c.tasks) == 0 {
			continue
		}
		n := 0
		for _, id := range c.tasks {
			if noAgent[id] {
				n++
			}
		}
		if n > 0 {
			k.NoAgent[c.kind] += float64(n) / float64(len(c.tasks))
		}
	}
	for kind, v := range k.NoAgent {
		k.NoAgent[kind] = math.Round(10*v) / 10
	}
	return k
}

// dumpSlowestDrain writes the log lines of the drain longest past its own
// longest task, from a second before its trigger on, to
// fleetsim-slowest-drain.jsonl in the output directory: what it waited
// for, when the check fails.
func dumpSlowestDrain(agents []drainAgent, fleet []*fleetAgent, dir string) {
	var worst *drainAgent
	for i, a := range agents {
		if worst == nil || a.DrainSeconds-a.LongestInFlight > worst.DrainSeconds-worst.LongestInFlight {
			worst = &agents[i]
		}
	}
	if worst == nil || dir == "" {
		return
	}
	for _, fa := range fleet {
		if fa.inst != worst.Instance || fa.Agent == nil {
			continue
		}
		trig := fa.Logs("lifecycle trigger")
		if len(trig) == 0 {
			return
		}
		from, err := harness.LogTime(trig[0])
		if err != nil {
			return
		}
		if os.MkdirAll(dir, 0o755) != nil {
			return
		}
		var out []byte
		for _, l := range fa.Logs("") {
			if at, err := harness.LogTime(l); err == nil && !at.Before(from.Add(-time.Second)) {
				b, _ := json.Marshal(l)
				out = append(append(out, b...), '\n')
			}
		}
		_ = os.WriteFile(filepath.Join(dir, "fleetsim-slowest-drain.jsonl"), out, 0o644)
	}
}
