package testenv

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// metadataMockStartup bounds how long ec2-metadata-mock may take to answer
// its first token request; it starts in well under a second on a quiet host,
// the rest is room for a loaded CI runner.
const metadataMockStartup = 15 * time.Second

// StartMetadataMock runs AWS's ec2-metadata-mock with args on a free
// loopback port, stops it when tb ends, and returns its URL once it hands out
// IMDSv2 tokens, along with when the process was started (the mock's own
// delays count from then). Its output is logged when tb fails.
func StartMetadataMock(tb testing.TB, args ...string) (string, time.Time) {
	tb.Helper()
	bin := EC2MetadataMock(tb)
	port := ClosedPort(tb)
	var out LockedBuffer
	home := tb.TempDir() // no stray $HOME/aemm-config.json
	cmd := exec.CommandContext(context.WithoutCancel(tb.Context()), bin, append(args, "--hostname", "127.0.0.1", "--port", port)...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	cmd.Dir = home
	cmd.Stdout, cmd.Stderr = &out, &out
	started := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", bin, err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if tb.Failed() {
			tb.Logf("ec2-metadata-mock output:\n%s", out.String())
		}
	})

	url := "http://127.0.0.1:" + port
	deadline := time.Now().Add(metadataMockStartup)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(tb.Context(), http.MethodPut, url+"/latest/api/token", nil)
		req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, started
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("ec2-metadata-mock did not answer on %s within %.0fs:\n%s", url, metadataMockStartup.Seconds(), out.String())
		}
		<-tick.C
	}
}

// ClosedPort is a loopback port nothing listens on: connections to it are
// refused at once. It also serves as a free port for a server to bind.
func ClosedPort(tb testing.TB) string {
	tb.Helper()
	l, err := new(net.ListenConfig).Listen(tb.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	return port
}

// LockedBuffer is a bytes.Buffer that output written from other goroutines
// (a child process's, a logger's) can share with the test reading it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
