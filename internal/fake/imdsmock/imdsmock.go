// Package imdsmock runs AWS's ec2-metadata-mock (the real instance
// metadata service's stand-in, a binary scripts/test.sh and
// scripts/chaos.sh install) on loopback and reads what it says. Tests
// reach it through internal/testenv, the lab programs through
// internal/harness. It imports nothing of the project.
//
// The mock is reached through a front that hands it one request at a
// time: ec2-metadata-mock v1.13.0 keeps its IMDSv2 tokens in a map without
// a lock (pkg/mock/imdsv2: every token PUT writes it, every request with
// a token reads it, an expired token is deleted), and a token PUT beside
// another request kills it with "fatal error: concurrent map read and map
// write", after which its port refuses connections.
package imdsmock

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// startup bounds how long ec2-metadata-mock may take to answer its first
// token request; it starts in well under a second on a quiet host, the
// rest is room for a loaded CI runner.
const startup = 15 * time.Second

// Mock is one running ec2-metadata-mock.
type Mock struct {
	URL     string    // http://127.0.0.1:PORT, the front that serialises requests
	Started time.Time // when the process started: the mock's own delays count from then
	mockURL string    // the process's own listener
	cmd     *exec.Cmd
	exited  chan struct{}
	tail    *tail
	front   *http.Server
	stopped atomic.Bool
}

// Stop kills the mock and waits until it is gone.
func (m *Mock) Stop() {
	m.stopped.Store(true)
	if m.front != nil {
		_ = m.front.Close()
	}
	_ = m.cmd.Process.Kill()
	<-m.exited
}

// Pid is the mock process's id.
func (m *Mock) Pid() int { return m.cmd.Process.Pid }

// Exited is closed when the mock process has ended, Stop or not.
func (m *Mock) Exited() <-chan struct{} { return m.exited }

// Died is nil while the mock runs and after Stop; once it ended on its own
// it says how, with the end of its output.
func (m *Mock) Died() error {
	select {
	case <-m.exited:
	default:
		return nil
	}
	if m.stopped.Load() {
		return nil
	}
	out := m.tail.String()
	why := ""
	for _, mark := range []string{"fatal error:", "panic:"} {
		if i := strings.Index(out, mark); i >= 0 {
			why = ": " + strings.TrimSpace(strings.SplitN(out[i:], "\n", 2)[0])
			break
		}
	}
	return fmt.Errorf("ec2-metadata-mock behind %s exited on its own (%s)%s; its last output:\n%s",
		m.URL, m.cmd.ProcessState, why, out)
}

// serve answers on l for the mock, one request at a time (the mock cannot
// take two: see the package comment); once the mock has died it answers
// 502 with how, so a client sees why instead of a refused connection.
func (m *Mock) serve(l net.Listener) {
	target, _ := url.Parse(m.mockURL)
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) }, // no X-Forwarded-For: IMDS refuses forwarded token requests
		Transport: &http.Transport{Proxy: nil, MaxIdleConns: 4, IdleConnTimeout: time.Minute},
	}
	var mu sync.Mutex
	m.front = &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			if err := m.Died(); err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			proxy.ServeHTTP(w, r)
		}),
	}
	go func() { _ = m.front.Serve(l) }()
}

// tailBytes is how much of the mock's output is kept for Died and Start's
// errors: the runtime's report of a crash and its goroutines (the mock
// runs a few) with room to spare.
const tailBytes = 64 << 10

// tail keeps the last tailBytes written to it.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > tailBytes {
		t.b = append(t.b[:0], t.b[len(t.b)-tailBytes:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Start runs the ec2-metadata-mock binary bin with args on a free loopback
// port, HOME and working directory home (no stray $HOME/aemm-config.json),
// its output to out, and returns once it hands out IMDSv2 tokens, with URL
// the front that gives it one request at a time. ctx bounds the wait, not
// the mock's life: Stop ends it. An error says what the mock wrote last.
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
		t := &tail{}
		cmd.Stdout = io.MultiWriter(out, t)
		cmd.Stderr = cmd.Stdout
		m := &Mock{mockURL: "http://127.0.0.1:" + port, Started: time.Now(), cmd: cmd, exited: make(chan struct{}), tail: t}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("start %s: %w", bin, err)
		}
		go func() { _ = cmd.Wait(); close(m.exited) }()
		ok, err := m.await(ctx)
		if err != nil {
			m.Stop()
			return nil, fmt.Errorf("%w; its last output:\n%s", err, t.String())
		}
		if !ok {
			if attempt == 3 {
				return nil, fmt.Errorf("ec2-metadata-mock exited before it listened, three times (%s); its last output:\n%s",
					cmd.ProcessState, t.String())
			}
			continue
		}
		l, err := listenLow(ctx)
		if err != nil {
			m.Stop()
			return nil, err
		}
		m.URL = "http://" + l.Addr().String()
		m.serve(l)
		return m, nil
	}
}

// await waits until the mock listens on its port and hands out a token:
// true; false if it exits first (its port was taken).
func (m *Mock) await(ctx context.Context) (bool, error) {
	port, _ := strconv.Atoi(m.mockURL[strings.LastIndexByte(m.mockURL, ':')+1:])
	deadline := time.Now().Add(startup)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if listens(m.cmd.Process.Pid, port) {
			if _, err := Token(ctx, m.mockURL); err == nil {
				return true, nil
			}
		}
		if time.Now().After(deadline) {
			return false, fmt.Errorf("ec2-metadata-mock did not answer on %s within %.0fs", m.mockURL, startup.Seconds())
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

// listenLow listens on a loopback port below the kernel's ephemeral range
// (see ClosedPort), held from the first bind; any free port when that
// range leaves no room.
func listenLow(ctx context.Context) (net.Listener, error) {
	const lowest = 20000
	if top := ephemeralLow(); top-lowest >= 1000 {
		for range 100 {
			if l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(lowest+rand.IntN(top-lowest))); err == nil {
				return l, nil
			}
		}
	}
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("ec2-metadata-mock front: %w", err)
	}
	return l, nil
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
