// Command redisrt measures what one task's Redis calls cost the server in
// CPU (INFO cpu), sequentially on one connection, flat out or paced: the
// agent's decision, claim, slot release and finish as four calls
// (`task`) or as the agent makes them on one server, two round trips: the
// claim with the decision in its script, the release in the finish's
// script (`task2`), the limiter's two (`allow`), a bare PING (`ping`,
// `ping4`: four in a row, `pipe4`: four in one pipeline), or one task's
// claim and finish with the record kept as the agent keeps it, a hash
// (`records-hash`), or as one string (`records-string`, records.go).
// Paced at the fleet's rate, each round trip finds Redis asleep and costs
// several times what it costs back to back: the round trips per task, not
// the commands in them, set the fleet's Redis CPU per task.
//
//	go run ./scripts/redisrt -addr 127.0.0.1:6379 -mode task -pause 20ms
//
// It writes keys under "redisrt:" on the server given; use a scratch one.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/limiter"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "redis-server (a scratch one)")
	mode := flag.String("mode", "task", "task, task2, allow, claim, decide, finish, records-hash, records-string, script, ping, ping4 or pipe4")
	pause := flag.Duration("pause", 0, "pause before each iteration (0: flat out)")
	n := flag.Int("n", 0, "iterations (0: 3000 flat out, else 10 s worth)")
	flag.Parse()
	if err := run(*addr, *mode, *pause, *n); err != nil {
		fmt.Fprintln(os.Stderr, "redisrt:", err)
		os.Exit(1)
	}
}

func run(addr, mode string, pause time.Duration, n int) error {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	st := state.NewRedis(c, state.RedisOptions{Prefix: "redisrt:", RecordTTL: recordTTL, AuditMaxLen: auditMaxLen})
	cfg := limiter.Config{Rules: []limiter.Rule{{Name: "cap", Key: limiter.KeyHost,
		Limits: []limiter.Limit{{Concurrency: limiter.Concurrency{Max: 3}}}}}}
	l, err := limiter.New(cfg, limiter.NewRedis(c, "redisrt:"), limiter.Options{})
	if err != nil {
		return err
	}
	one := redis.NewScript("return 1")
	if n <= 0 {
		n = 3000
		if pause > 0 {
			n = int(10 * time.Second / pause)
		}
	}
	c0, err := cpu(ctx, c)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for i := range n {
		time.Sleep(pause)
		id := fmt.Sprintf("t-%d-%d", t0.UnixNano(), i)
		r := limiter.Request{Host: fmt.Sprintf("h%d", i%50), Diagnostic: "quick", TaskID: id, Lease: 30 * time.Second}
		switch mode {
		case "ping":
			err = c.Ping(ctx).Err()
		case "ping4":
			for range 4 {
				err = c.Ping(ctx).Err()
			}
		case "pipe4":
			_, err = c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for range 4 {
					p.Ping(ctx)
				}
				return nil
			})
		case "allow":
			if _, err = l.Allow(ctx, r); err == nil {
				err = l.Done(ctx, r, "succeeded")
			}
		case "task":
			err = task(ctx, l, st, r)
		case "task2":
			err = task2(ctx, l, st, r)
		case "claim":
			_, err = st.Claim(ctx, state.TaskRecord{ID: r.TaskID, Host: r.Host, Diagnostic: r.Diagnostic}, "i-1", r.Lease)
		case "decide":
			// Slots lapse within the second: the cap never denies.
			r.Lease = time.Second
			_, err = l.Allow(ctx, r)
		case "finish":
			err = st.Finish(ctx, state.TaskRecord{ID: r.TaskID, Host: r.Host, Diagnostic: r.Diagnostic, Owner: "i-1", Attempts: 1},
				state.FinishExtras{ID: state.NewFinishID(), Audit: &state.AuditEntry{TaskID: r.TaskID, Outcome: "succeeded"}})
		case "script":
			err = one.Run(ctx, c, nil).Err()
		case "records-hash", "records-string":
			err = records(ctx, c, st, strings.TrimPrefix(mode, "records-"), id, r.Host, r.Lease)
		default:
			return fmt.Errorf("-mode %q: want task, task2, allow, claim, decide, finish, records-hash, records-string, script, ping, ping4 or pipe4", mode)
		}
		if err != nil {
			return err
		}
	}
	c1, err := cpu(ctx, c)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %.1f µs of Redis CPU per iteration (%.0f/s, %d iterations)\n",
		mode, (c1-c0)*1e6/float64(n), float64(n)/time.Since(t0).Seconds(), n)
	return nil
}

// task is the agent's four calls for a task that runs: decision, claim,
// slot release, finish with its audit entry.
func task(ctx context.Context, l *limiter.Limiter, st state.Store, r limiter.Request) error {
	if _, err := l.Allow(ctx, r); err != nil {
		return err
	}
	cl, err := st.Claim(ctx, state.TaskRecord{ID: r.TaskID, Host: r.Host, Diagnostic: r.Diagnostic}, "i-1", r.Lease)
	if err != nil {
		return err
	}
	if err := l.Done(ctx, r, "succeeded"); err != nil {
		return err
	}
	rec := cl.Record
	rec.Status = "succeeded"
	return st.Finish(ctx, rec, state.FinishExtras{ID: state.NewFinishID(),
		Audit: &state.AuditEntry{TaskID: r.TaskID, Outcome: "succeeded"}})
}

// task2 is task in the agent's two round trips on one server: the claim
// with the decision in its script (state.ClaimThen, limiter.Fold), then
// the finish with the slot release in its script (FinishExtras.Calls with
// their source).
func task2(ctx context.Context, l *limiter.Limiter, st state.Store, r limiter.Request) error {
	f, ok := l.Fold(r)
	if !ok {
		return fmt.Errorf("the decision does not fold")
	}
	cl, reply, folded, err := st.ClaimThen(ctx, state.TaskRecord{ID: r.TaskID, Host: r.Host, Diagnostic: r.Diagnostic}, "i-1", r.Lease,
		state.Then{Source: f.Source, Keys: f.Keys, Args: f.Args})
	if err != nil || !folded {
		return fmt.Errorf("claim: folded %v: %w", folded, err)
	}
	if _, err := f.Resolve(ctx, reply); err != nil {
		return err
	}
	sc, _ := l.DoneCalls(r, "succeeded")
	var calls []state.Call
	for _, c := range sc {
		calls = append(calls, state.Call{Script: c.Script, Source: c.Source, Keys: c.Keys, Args: c.Args, Fallback: func(context.Context) {}})
	}
	rec := cl.Record
	rec.Status = "succeeded"
	return st.Finish(ctx, rec, state.FinishExtras{ID: state.NewFinishID(), Calls: calls,
		Audit: &state.AuditEntry{TaskID: r.TaskID, Outcome: "succeeded"}})
}

// cpu is the server's used_cpu_sys + used_cpu_user, seconds.
func cpu(ctx context.Context, c *redis.Client) (float64, error) {
	s, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("info: %w", err)
	}
	t := 0.0
	for _, line := range strings.Split(s, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			t += f
		}
	}
	return t, nil
}
