// Package imdsmock runs AWS's ec2-metadata-mock (the real instance
// metadata service's stand-in, a binary scripts/test.sh and
// scripts/chaos.sh install) on loopback and reads what it says. Tests
// reach it through internal/testenv, the lab programs through
// internal/harness. It imports nothing of the project.
package imdsmock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// startup bounds how long ec2-metadata-mock may take to answer its first
// token request; it starts in well under a second on a quiet host, the
// rest is room for a loaded CI runner.
const startup = 15 * time.Second

// Mock is one running ec2-metadata-mock.
type Mock struct {
	URL     string    // http://127.0.0.1:PORT
	Started time.Time // when the process started: the mock's own delays count from then
	cmd     *exec.Cmd
	exited  chan struct{}
}

// Stop kills the mock and waits until it is gone.
func (m *Mock) Stop() {
	_ = m.cmd.Process.Kill()
	<-m.exited
}

// Start runs the ec2-metadata-mock binary bin with args on a free loopback
// port, HOME and working directory home (no stray $HOME/aemm-config.json),
// its output to out, and returns once it hands out IMDSv2 tokens. ctx
// bounds the wait, not the mock's life: Stop ends it.
//
// The port is free when chosen, not reserved: another process can bind it
// before the mock does, and the mock then exits. It is started again on
// another port, three times at most; and the mock is returned only once
// the port's listener is its own, so a token from someone else's server
// on that port is never taken for the mock's.
func Start(ctx context.Context, bin, home string, out io.Writer, args ...string) (*Mock, error) {
	for attempt := 1; ; attempt++ {
		port, err := ClosedPort(ctx)
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(context.WithoutCancel(ctx), bin, append(args, "--hostname", "127.0.0.1", "--port", port)...)
		cmd.Env = append(os.Environ(), "HOME="+home)
		cmd.Dir = home
		cmd.Stdout, cmd.Stderr = out, out
		m := &Mock{URL: "http://127.0.0.1:" + port, Started: time.Now(), cmd: cmd, exited: make(chan struct{})}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", bin, err)
		}
		go func() { _ = cmd.Wait(); close(m.exited) }()
		ok, err := m.await(ctx)
		if err != nil {
			m.Stop()
			return nil, err
		}
		if ok {
			return m, nil
		}
		if attempt == 3 {
			return nil, errors.New("ec2-metadata-mock exited before it listened, three times")
		}
	}
}

// await waits until the mock listens on its port and hands out a token:
// true; false if it exits first (its port was taken).
func (m *Mock) await(ctx context.Context) (bool, error) {
	port, _ := strconv.Atoi(m.URL[strings.LastIndexByte(m.URL, ':')+1:])
	deadline := time.Now().Add(startup)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if listens(m.cmd.Process.Pid, port) {
			if _, err := Token(ctx, m.URL); err == nil {
				return true, nil
			}
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("ec2-metadata-mock did not answer on %s within %.0fs", m.URL, startup.Seconds())
		}
		select {
		case <-m.exited:
			return false, nil
		case <-ctx.Done():
			return false, fmt.Errorf("ec2-metadata-mock: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

var client = &http.Client{Timeout: 2 * time.Second}

// Token asks the IMDS at base for an IMDSv2 token.
func Token(ctx context.Context, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/latest/api/token", nil)
	if err != nil {
		return "", fmt.Errorf("imds token: %w", err)
	}
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", "60")
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("imds token: %w", err)
	}
	defer resp.Body.Close()
	tok, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("imds token: %s", resp.Status)
	}
	return string(tok), nil
}

// LifecycleState reads autoscaling/target-lifecycle-state (IMDSv2) from
// the IMDS at base.
func LifecycleState(ctx context.Context, base string) (string, error) {
	tok, err := Token(ctx, base)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/latest/meta-data/autoscaling/target-lifecycle-state", nil)
	if err != nil {
		return "", fmt.Errorf("imds state: %w", err)
	}
	req.Header.Set("X-aws-ec2-metadata-token", tok)
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("imds state: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("target-lifecycle-state: %s", resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
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
func ClosedPort(ctx context.Context) (string, error) {
	const lowest = 20000
	if top := ephemeralLow(); top-lowest >= 1000 {
		for range 100 {
			p := strconv.Itoa(lowest + rand.IntN(top-lowest))
			if l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:"+p); err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("closed port: %w", err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	return port, nil
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
