package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"
)

// toxiproxy is a toxiproxy-server driven through its HTTP API.
type toxiproxy struct{ api string }

func (l *lab) startToxiproxy() (*toxiproxy, error) {
	if l.toxi == "" {
		return nil, errors.New("toxiproxy-server not given (-toxiproxy; scripts/chaos.sh installs it)")
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.CommandContext(context.Background(), l.toxi, "-host", host, "-port", port)
	if err := l.spawn(cmd); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait() }()
	t := &toxiproxy{api: "http://" + addr}
	if !eventually(10*time.Second, func() bool { _, err := t.do(http.MethodGet, "/version", ""); return err == nil }) {
		return nil, errors.New("toxiproxy-server did not answer within 10s")
	}
	return t, nil
}

func (t *toxiproxy) do(method, path, body string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, t.api+path, strings.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("toxiproxy %s %s: %w", method, path, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("toxiproxy %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return "", fmt.Errorf("toxiproxy %s %s: %s %s", method, path, resp.Status, b)
	}
	return string(b), nil
}

// R3b: 300 ms latency both ways between the agents and Redis, above
// redis.timeout (200 ms): the fail-open agent runs its tasks with degraded
// decisions, the fail-closed agent runs none; once the latency is gone
// every task runs once and nothing stays in flight.
func r3b(l *lab) (string, bool, error) {
	const (
		timeout = 200 * time.Millisecond
		latency = 300 * time.Millisecond
	)
	rs, err := l.newRedis("r3b")
	if err != nil {
		return "", false, err
	}
	tp, err := l.startToxiproxy()
	if err != nil {
		return "", false, err
	}
	proxyAddr, err := freeAddr()
	if err != nil {
		return "", false, err
	}
	if _, err := tp.do(http.MethodPost, "/proxies", fmt.Sprintf(`{"name":"redis","listen":%q,"upstream":%q,"enabled":true}`, proxyAddr, rs.addr)); err != nil {
		return "", false, err
	}
	led, err := l.newLedger("r3b")
	if err != nil {
		return "", false, err
	}
	open, closed, qOpen, qClosed, err := r3Agents(l, "r3b", proxyAddr, timeout, led)
	if err != nil {
		return "", false, err
	}
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := tp.do(http.MethodPost, "/proxies/redis/toxics", fmt.Sprintf(
			`{"name":"lat-%s","type":"latency","stream":%q,"toxicity":1,"attributes":{"latency":%d}}`, stream, stream, latency.Milliseconds()/2)); err != nil {
			return "", false, err
		}
	}
	openIDs, closedIDs := ids("open", 5), ids("closed", 5)
	sent := map[string]time.Time{}
	for i := range openIDs {
		sent[openIDs[i]] = time.Now()
		if err := l.send(qOpen, taskBody(openIDs[i], "mark")); err != nil {
			return "", false, err
		}
		if err := l.send(qClosed, taskBody(closedIDs[i], "mark")); err != nil {
			return "", false, err
		}
	}
	openRan := eventually(30*time.Second, func() bool { lost, _ := onceEach(led, openIDs); return lost == 0 })
	// The closed agent's messages come back with backoff; give it the same
	// time the open agent needed plus a few of its retries.
	time.Sleep(3 * time.Second)
	n, first := led.counts()
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
	limDegraded := open.metric("autodiag_limiter_degraded_total")
	claimDegraded := closed.metric("autodiag_state_degraded_total", `op="claim"`)
	for _, stream := range []string{"upstream", "downstream"} {
		if _, err := tp.do(http.MethodDelete, "/proxies/redis/toxics/lat-"+stream, ""); err != nil {
			return "", false, err
		}
	}
	lifted := time.Now()
	all := append(append([]string{}, openIDs...), closedIDs...)
	settled := eventually(90*time.Second, func() bool {
		lost, _ := onceEach(led, all)
		return lost == 0 && l.drained("r3b-open") && l.drained("r3b-closed") &&
			open.metric("autodiag_tasks_inflight") == 0 && closed.metric("autodiag_tasks_inflight") == 0
	})
	lost, twice := onceEach(led, all)
	// Claim and limiter decision each wait at most redis.timeout; the
	// receive and the fork take the rest of the allowance.
	bound := 2*timeout + time.Second
	m := fmt.Sprintf("open: %d/%d ran, slowest %s from send (bound %s), limiter degraded %g; closed: %d ran under latency, claim degraded %g; after lifting: settled in %s, lost %d, twice %d",
		len(openIDs)-func() int { l, _ := onceEach(led, openIDs); return l }(), len(openIDs), secs(worst), secs(bound), limDegraded,
		closedRan, claimDegraded, secs(time.Since(lifted)), lost, twice)
	pass := openRan && worst <= bound && limDegraded >= float64(len(openIDs)) && closedRan == 0 && claimDegraded > 0 &&
		settled && lost == 0 && twice == 0
	return m, pass, nil
}
