package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/autodiag/autodiag/internal/fake/asgfake"
	"github.com/autodiag/autodiag/internal/fake/imdsmock"
)

// Lab is what a lab program (scripts/chaos, scripts/fleet) runs in: a
// directory, the binary built into it, an SQS fake for the whole run, and
// every process it starts, so that one Stop ends them all whatever
// happened. Tests do not use it: they stop what they start with
// t.Cleanup.
type Lab struct {
	Dir string
	Bin string
	SQS *SQS

	mu      sync.Mutex
	procs   []*Process
	closers []func()
	once    sync.Once
}

// NewLab builds autodiag into a fresh directory and serves the SQS fake. A
// SIGINT or SIGTERM runs Stop and exits 130: a lab runs its scenes on the
// main goroutine and is not interruptible otherwise.
func NewLab(name string) (*Lab, error) {
	dir, err := os.MkdirTemp("", "autodiag-"+name)
	if err != nil {
		return nil, fmt.Errorf("lab dir: %w", err)
	}
	l := &Lab{Dir: dir}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		l.Stop()
		fmt.Fprintf(os.Stderr, "%s: interrupted; everything started is stopped\n", name)
		os.Exit(130)
	}()
	if l.Bin, err = Build(context.Background(), dir); err != nil {
		l.Stop()
		return nil, err
	}
	if l.SQS, err = StartSQS(nil); err != nil {
		l.Stop()
		return nil, err
	}
	return l, nil
}

// Stop ends every process and server and removes the directory.
func (l *Lab) Stop() {
	l.once.Do(func() {
		l.StopProcesses()
		l.mu.Lock()
		closers := l.closers
		l.closers = nil
		l.mu.Unlock()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		if l.SQS != nil {
			l.SQS.Close()
		}
		os.RemoveAll(l.Dir)
	})
}

// StopProcesses kills every process started so far and their children:
// what one scene started does not run into the next. Each is stopped
// first, so that none starts anything while the others' children are
// found.
func (l *Lab) StopProcesses() {
	l.mu.Lock()
	procs := l.procs
	l.procs = nil
	l.mu.Unlock()
	for _, p := range procs {
		if p.Alive() {
			_ = syscall.Kill(p.Pid(), syscall.SIGSTOP)
		}
	}
	children := childrenByParent()
	for _, p := range procs {
		if p.Alive() {
			killTree(p.Pid(), children)
		}
	}
	for _, p := range procs {
		<-p.Done()
	}
}

// OnStop has Stop call f (servers the lab serves); last added, first
// called.
func (l *Lab) OnStop(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closers = append(l.closers, f)
}

func (l *Lab) track(p *Process) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.procs = append(l.procs, p)
}

// Subdir is a fresh directory in the lab's.
func (l *Lab) Subdir(name string) (string, error) {
	dir := filepath.Join(l.Dir, name+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("lab dir: %w", err)
	}
	return dir, nil
}

// SpawnAgent runs the binary with yaml (AWS_ENDPOINT_URL_SQS at the lab's
// fake, then env) without waiting for it to be ready.
func (l *Lab) SpawnAgent(yaml string, env ...string) (*Agent, error) {
	a, err := SpawnAgent(AgentSpec{Bin: l.Bin, Dir: l.Dir, Config: yaml, Env: append(l.SQS.Env(), env...)})
	if err != nil {
		return nil, err
	}
	l.track(a.Process)
	return a, nil
}

// StartAgent is SpawnAgent, then waits for the agent's "ready" line.
func (l *Lab) StartAgent(yaml string, env ...string) (*Agent, error) {
	a, err := l.SpawnAgent(yaml, env...)
	if err != nil {
		return nil, err
	}
	return a, a.AwaitReady(readyTimeout)
}

// StartRedis runs a redis-server of the lab's on a free port.
func (l *Lab) StartRedis(name string) (*Redis, error) {
	r, err := StartRedis(filepath.Join(l.Dir, "redis-"+name), "")
	if err != nil {
		return nil, err
	}
	l.track(r.proc)
	return r, nil
}

// StartRedisCluster runs a Redis Cluster of n masters of the lab's.
func (l *Lab) StartRedisCluster(name string, n int) (*RedisCluster, error) {
	c, err := StartRedisCluster(filepath.Join(l.Dir, "redis-cluster-"+name), n)
	if err != nil {
		return nil, err
	}
	for _, r := range c.Nodes {
		l.track(r.proc)
	}
	return c, nil
}

// RestartRedis starts r again, empty, after Kill.
func (l *Lab) RestartRedis(r *Redis) error {
	if err := r.Start(); err != nil {
		return err
	}
	l.track(r.proc)
	return nil
}

// NewLedger is a ledger with MarkScript in the lab's directory.
func (l *Lab) NewLedger(name string) (*Ledger, error) {
	return NewLedger(filepath.Join(l.Dir, "ledger-"+name), "mark.sh", MarkScript)
}

// StartToxiproxy runs toxiproxy-server (the binary bin).
func (l *Lab) StartToxiproxy(bin string) (*Toxiproxy, error) {
	t, err := StartToxiproxy(bin)
	if err != nil {
		return nil, err
	}
	l.track(t.proc)
	return t, nil
}

// StartASG serves an Auto Scaling fake until Stop.
func (l *Lab) StartASG(wrap Wrap, o asgfake.Options) (*ASG, error) {
	a, err := StartASG(wrap, o)
	if err != nil {
		return nil, err
	}
	l.OnStop(a.Close)
	return a, nil
}

// StartMetadataMock runs ec2-metadata-mock (the binary bin) with args
// until Stop.
func (l *Lab) StartMetadataMock(bin string, args ...string) (*imdsmock.Mock, error) {
	if bin == "" {
		return nil, fmt.Errorf("ec2-metadata-mock not given (-imds-mock; scripts/chaos.sh installs it)")
	}
	home, err := l.Subdir("imds")
	if err != nil {
		return nil, err
	}
	m, err := imdsmock.Start(context.Background(), bin, home, io.Discard, args...)
	if err != nil {
		return nil, err
	}
	l.OnStop(m.Stop)
	return m, nil
}
