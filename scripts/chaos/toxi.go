package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/autodiag/autodiag/internal/harness"
)

// R3b: 300 ms latency both ways between the agents and Redis, above
// redis.timeout (200 ms): the fail-open agent runs its tasks with degraded
// decisions, the fail-closed agent runs none; once the latency is gone
// every task runs once and nothing stays in flight.
func r3b(l *lab) (string, bool, error) {
	const (
		timeout = 200 * time.Millisecond
		latency = 300 * time.Millisecond
	)
	rs, err := l.StartRedis("r3b")
	if err != nil {
		return "", false, err
	}
	tp, err := l.StartToxiproxy(l.toxi)
	if err != nil {
		return "", false, err
	}
	proxyAddr, err := harness.FreeAddr()
	if err != nil {
		return "", false, err
	}
	if _, err := tp.Do(http.MethodPost, "/proxies", fmt.Sprintf(`{"name":"redis","listen":%q,"upstream":%q,"enabled":true}`, proxyAddr, rs.Addr)); err != nil {
		return "", false, err
	}
	led, err := l.NewLedger("r3b")
	if err != nil {
		return "", false, err
	}
	open, closed, qOpen, qClosed, err := r3Agents(l, "r3b", proxyAddr, timeout, led)
	if err != nil {
		return "", false, err
	}
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := tp.Do(http.MethodPost, "/proxies/redis/toxics", fmt.Sprintf(
			`{"name":"lat-%s","type":"latency","stream":%q,"toxicity":1,"attributes":{"latency":%d}}`, stream, stream, latency.Milliseconds()/2)); err != nil {
			return "", false, err
		}
	}
	openIDs, closedIDs := harness.IDs("open", 5), harness.IDs("closed", 5)
	sent := map[string]time.Time{}
	for i := range openIDs {
		sent[openIDs[i]] = time.Now()
		if err := l.send(qOpen, harness.TaskBody(openIDs[i], "mark")); err != nil {
			return "", false, err
		}
		if err := l.send(qClosed, harness.TaskBody(closedIDs[i], "mark")); err != nil {
			return "", false, err
		}
	}
	openRan := harness.Until(30*time.Second, func() bool { lost, _ := led.OnceEach(openIDs); return lost == 0 })
	// The closed agent's messages come back with backoff; give it the same
	// time the open agent needed plus a few of its retries.
	time.Sleep(3 * time.Second)
	n, first, _ := led.Counts()
	closedRan := 0
	for _, id := range closedIDs {
		closedRan += n[id]
	}
	var worst time.Duration
	for _, id := range openIDs {
		if d := first[id].Sub(sent[id]); d > worst {
			worst = d
		}
	}
	limDegraded := metric(open, "autodiag_limiter_degraded_total")
	claimDegraded := metric(closed, "autodiag_state_degraded_total", `op="claim"`)
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := tp.Do(http.MethodDelete, "/proxies/redis/toxics/lat-"+stream, ""); err != nil {
			return "", false, err
		}
	}
	lifted := time.Now()
	all := append(append([]string{}, openIDs...), closedIDs...)
	settled := harness.Until(90*time.Second, func() bool {
		lost, _ := led.OnceEach(all)
		return lost == 0 && l.SQS.Drained("r3b-open") && l.SQS.Drained("r3b-closed") &&
			metric(open, "autodiag_tasks_inflight") == 0 && metric(closed, "autodiag_tasks_inflight") == 0
	})
	lost, twice := led.OnceEach(all)
	// Claim and limiter decision each wait at most redis.timeout; the
	// receive and the fork take the rest of the allowance.
	bound := 2*timeout + time.Second
	m := fmt.Sprintf("open: %d/%d ran, slowest %s from send (bound %s), limiter degraded %g; closed: %d ran under latency, claim degraded %g; after lifting: settled in %s, lost %d, twice %d",
		len(openIDs)-func() int { lost, _ := led.OnceEach(openIDs); return lost }(), len(openIDs), secs(worst), secs(bound), limDegraded,
		closedRan, claimDegraded, secs(time.Since(lifted)), lost, twice)
	pass := openRan && worst <= bound && limDegraded >= float64(len(openIDs)) && closedRan == 0 && claimDegraded > 0 &&
		settled && lost == 0 && twice == 0
	return m, pass, nil
}
