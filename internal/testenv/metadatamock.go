package testenv

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
//
// The port is free when chosen, not reserved: another process can bind it
// before the mock does, and the mock then exits. It is started again on
// another port; and the URL is returned only once the port's listener is
// the mock's own, so a token from someone else's server on that port is
// never taken for the mock's.
func StartMetadataMock(tb testing.TB, args ...string) (string, time.Time) {
	tb.Helper()
	bin := EC2MetadataMock(tb)
	home := tb.TempDir() // no stray $HOME/aemm-config.json
	var out LockedBuffer
	for attempt := 1; ; attempt++ {
		port := ClosedPort(tb)
		cmd := exec.CommandContext(context.WithoutCancel(tb.Context()), bin, append(args, "--hostname", "127.0.0.1", "--port", port)...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		cmd.Dir = home
		cmd.Stdout, cmd.Stderr = &out, &out
		started := time.Now()
		if err := cmd.Start(); err != nil {
			tb.Fatalf("start %s: %v", bin, err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		tb.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
			if tb.Failed() {
				tb.Logf("ec2-metadata-mock output:\n%s", out.String())
			}
		})
		url := "http://127.0.0.1:" + port
		if waitMetadataMock(tb, url, cmd.Process.Pid, exited) {
			return url, started
		}
		if attempt == 3 {
			tb.Fatalf("ec2-metadata-mock exited before it listened, three times:\n%s", out.String())
		}
	}
}

// waitMetadataMock waits until the mock with pid listens on url and hands
// out a token: true; false if it exits first (its port was taken).
func waitMetadataMock(tb testing.TB, url string, pid int, exited <-chan struct{}) bool {
	tb.Helper()
	port, _ := strconv.Atoi(url[strings.LastIndexByte(url, ':')+1:])
	deadline := time.Now().Add(metadataMockStartup)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if listens(pid, port) {
			req, _ := http.NewRequestWithContext(tb.Context(), http.MethodPut, url+"/latest/api/token", nil)
			req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return true
				}
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("ec2-metadata-mock did not answer on %s within %.0fs", url, metadataMockStartup.Seconds())
		}
		select {
		case <-exited:
			return false
		case <-tick.C:
		}
	}
}

// listens reports whether process pid holds a listening TCP socket on
// loopback port port (Linux: /proc/net/tcp and the process's descriptors);
// true where /proc cannot tell.
func listens(pid, port int) bool {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return true
	}
	inodes := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		f := strings.Fields(line)
		if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	if len(inodes) == 0 {
		return false
	}
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && inodes[target] {
			return true
		}
	}
	return false
}

// ClosedPort is a loopback port nothing listens on: connections to it are
// refused at once. It also serves as a free port for a server to bind.
//
// It lies below the kernel's ephemeral range, which outgoing connections
// take their local ports from: a server stopped and started again on it
// (an outage) cannot find it taken by one of them, and a client dialling
// it cannot be handed it as its own port and connect to itself.
func ClosedPort(tb testing.TB) string {
	tb.Helper()
	const lowest = 20000
	if top := ephemeralLow(); top-lowest >= 1000 {
		for range 100 {
			p := strconv.Itoa(lowest + rand.IntN(top-lowest))
			if l, err := new(net.ListenConfig).Listen(tb.Context(), "tcp", "127.0.0.1:"+p); err == nil {
				l.Close()
				return p
			}
		}
	}
	l, err := new(net.ListenConfig).Listen(tb.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	return port
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
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
