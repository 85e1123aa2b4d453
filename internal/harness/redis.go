package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisStartup bounds how long a fresh redis-server takes to answer PING.
const redisStartup = 10 * time.Second

// Redis is a redis-server of the caller's own (no persistence), so that it
// can be killed and started again empty without touching a shared one.
type Redis struct {
	Addr string
	dir  string
	proc *Process
}

// StartRedis runs redis-server in dir on addr ("" = a free loopback port)
// and waits until it answers.
func StartRedis(dir, addr string) (*Redis, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("redis-server: %w (apt-get install -y redis-server)", err)
	}
	if addr == "" {
		var err error
		if addr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redis dir: %w", err)
	}
	r := &Redis{Addr: addr, dir: dir}
	return r, r.Start()
}

// Start runs the server again on the same address, empty.
func (r *Redis) Start() error {
	_, port, _ := net.SplitHostPort(r.Addr)
	// Not bound to a context: Kill ends it, at an outage and at the end.
	cmd := exec.CommandContext(context.Background(), "redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log"))
	p, err := StartProcess(cmd)
	if err != nil {
		return err
	}
	r.proc = p
	c := r.Client()
	defer c.Close()
	if !Until(redisStartup, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	}) {
		r.Kill()
		return errors.New("redis-server did not answer within 10s")
	}
	return nil
}

// Kill sends SIGKILL and waits for the server to be gone.
func (r *Redis) Kill() {
	if r.proc == nil {
		return
	}
	r.proc.KillTree()
	r.proc = nil
}

// Client is a new client of the server; the caller closes it.
func (r *Redis) Client() *redis.Client { return redis.NewClient(&redis.Options{Addr: r.Addr}) }
