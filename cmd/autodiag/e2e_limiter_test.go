package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/testenv"
)

func uniquePrefix(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return "autodiag-test:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

// TestFleetDailyQuotaAcrossProcesses: four separate autodiag processes
// sharing one Redis make 1000 concurrent decisions against `daily: 2`;
// exactly two run.
func TestFleetDailyQuotaAcrossProcesses(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := uniquePrefix(t)
	cfg := fmt.Sprintf(`
admin_addr: 127.0.0.1:0
workers: 8
redis:
  url: redis://%s/0
  prefix: %q
  timeout: 2s
diagnostics:
  - name: noop
    command: [/bin/true, '{host}']
    runs_on: any
    timeout: 10s
limiter:
  timezone: America/Sao_Paulo
  fail: closed
  hosts:
    allow: ['^[a-z0-9-]+(\.[a-z0-9-]+)*$']
  rules:
    - name: quota
      key: host
      limits: [{daily: 2}]
`, addr, prefix)
	procs := make([]*proc, 4)
	for i := range procs {
		procs[i] = startProc(t, cfg, fmt.Sprintf("AUTODIAG_INSTANCE_ID=fleet-%d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for i := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := procs[i%len(procs)]
			body := fmt.Sprintf(`{"id":"q-%d","host":"web-01","diagnostic":"noop"}`, i)
			resp, err := httpDo(t, http.MethodPost, p.url("/v1/tasks"), body)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				errs <- fmt.Errorf("POST %d: %s", i, resp.Status)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := func(outcome string) int {
		n := 0
		for _, p := range procs {
			o, _ := p.status()["outcomes"].(map[string]any)
			f, _ := o[outcome].(float64)
			n += int(f)
		}
		return n
	}
	eventually(t, 90*time.Second, "1000 outcomes", func() bool { return total("succeeded")+total("rate_limited") == 1000 })
	if got := total("succeeded"); got != 2 {
		t.Fatalf("succeeded = %d across 4 processes, want exactly 2 (daily: 2)", got)
	}
	if got := total("rate_limited"); got != 998 {
		t.Fatalf("rate_limited = %d, want 998", got)
	}
}
