package main

import (
	"context"
	"sync"
	"time"
)

// fleetStallChunk is how long Redis is held busy at a time by -redis-stall:
// longer than the lifecycle poll's hide of a notice (1 s,
// lifecycle.receiveVisibility), so that a hand-off's Give started in it
// outlasts that hide, and shorter than the agents' redis.timeout (2 s,
// internal/harness), so that the stall alone puts no call past it and no
// fail mode applies. fleetStallGap lets Redis answer what queued behind
// each chunk.
const (
	fleetStallChunk = 1500 * time.Millisecond
	fleetStallGap   = 250 * time.Millisecond
)

// stallLua keeps Redis busy for ARGV[1] microseconds: a script runs alone,
// so every other client waits for it (lua-time-limit, 5 s, is not reached).
const stallLua = `local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= tonumber(ARGV[1])
return 1`

// stallRedis holds every node busy in chunks of fleetStallChunk, with
// fleetStallGap between them, until ctx ends; it returns how many chunks
// each node served. It is what a Redis that answers late looks like to
// the agents (the slow machine's spikes, a slow command, a fork), made
// repeatable.
func stallRedis(ctx context.Context, nodes redisNodes) int {
	var mu sync.Mutex
	chunks := 0
	var wg sync.WaitGroup
	for _, c := range nodes {
		wg.Go(func() {
			for ctx.Err() == nil {
				// Bounded by the chunk plus a margin, not by ctx: a script
				// cut off mid-run would leave the connection's reply unread.
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fleetStallChunk+5*time.Second)
				err := c.Eval(sctx, stallLua, nil, fleetStallChunk.Microseconds()).Err()
				cancel()
				if err != nil {
					logf("redis stall: %v", err)
					return
				}
				mu.Lock()
				chunks++
				mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(fleetStallGap):
				}
			}
		})
	}
	wg.Wait()
	return chunks
}
