package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2EStandaloneIntakeMetrics: `autodiag intake` serves /metrics on
// admin_addr (loopback), and an alert it routed is counted there.
func TestE2EStandaloneIntakeMetrics(t *testing.T) {
	fq := newSQSFake(t, "central-metrics")
	l := newAlertLedger(t)
	const token = "central-token"
	cfgPath := sqsWriteConfig(t, alertAgentYAML(t, fq.url, "127.0.0.1:1", "x:", l))
	cmd := exec.CommandContext(t.Context(), binPath, "intake", "--config", cfgPath)
	cmd.Env = append(append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, fq.awsEnv()...), intakeTokenEnv+"="+token)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The admin listener is up before the intake listens.
	addrs := make(chan map[string]string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		got := map[string]string{}
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			if msg, _ := m["msg"].(string); msg == "admin listening" || msg == "intake listening" {
				got[msg], _ = m["addr"].(string)
				if len(got) == 2 {
					addrs <- got
				}
			}
		}
	}()
	var got map[string]string
	select {
	case got = <-addrs:
	case <-scanned:
		t.Fatal("intake exited before listening")
	case <-time.After(30 * time.Second):
		t.Fatal("intake not listening after 30s")
	}
	admin := got["admin listening"]
	if host, _, err := net.SplitHostPort(admin); err != nil || !net.ParseIP(host).IsLoopback() {
		t.Fatalf("admin address %q (%v): want loopback, as admin_addr says", admin, err)
	}
	metrics := func() string {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+admin+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
		}
		return string(b)
	}
	const accepted = `autodiag_alerts_total{result="accepted",source="alertmanager"} 2`
	if m := metrics(); strings.Contains(m, accepted) || !strings.Contains(m, "go_goroutines ") {
		t.Fatalf("/metrics before any alert:\n%s", m)
	}
	if code, body := postAlert(t, got["intake listening"], "/v1/alerts/alertmanager", token, fixture(t, "alertmanager_v4.json")); code != http.StatusOK {
		t.Fatalf("answer %d %s", code, body)
	}
	if m := metrics(); !strings.Contains(m, accepted) {
		t.Fatalf("/metrics lacks %s:\n%s", accepted, m)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil { // the second stops at once
		t.Fatal(err)
	}
	<-scanned
	if err := cmd.Wait(); err != nil {
		t.Fatalf("intake exit: %v", err)
	}
}
