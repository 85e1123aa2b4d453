package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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
	args []string // more redis-server arguments
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
	cmd := exec.CommandContext(context.Background(), "redis-server", append([]string{"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis.log")}, r.args...)...)
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

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// RedisCluster is a Redis Cluster of the caller's own: masters only, the
// slots split evenly, on loopback ports below the kernel's ephemeral range
// (a node's bus port is its port + 10000).
type RedisCluster struct {
	Nodes []*Redis
}

// StartRedisCluster runs n cluster-enabled redis-servers in dirs under
// dir, assigns each its share of the slots, joins them and waits until
// every node reports cluster_state:ok.
func StartRedisCluster(dir string, n int) (*RedisCluster, error) {
	c := &RedisCluster{}
	for i := range n {
		r, err := startClusterNode(dir)
		if err != nil {
			c.Kill()
			return nil, fmt.Errorf("cluster node %d: %w", i, err)
		}
		c.Nodes = append(c.Nodes, r)
	}
	if err := c.join(); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

// clusterNodeTries is how many ports a cluster node is tried on: another
// process may bind one between clusterPort's check and the node's.
const clusterNodeTries = 3

// startClusterNode runs one cluster-enabled redis-server in a dir of its
// own under dir.
func startClusterNode(dir string) (*Redis, error) {
	var err error
	for range clusterNodeTries {
		var port string
		if port, err = clusterPort(); err != nil {
			return nil, err
		}
		ndir := filepath.Join(dir, "node-"+port)
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			return nil, fmt.Errorf("redis dir: %w", err)
		}
		r := &Redis{Addr: "127.0.0.1:" + port, dir: ndir,
			args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}}
		if err = r.Start(); err == nil {
			return r, nil
		}
	}
	return nil, err
}

// clusterBusOffset is how far above its port a cluster node listens for
// the cluster bus.
const clusterBusOffset = 10000

// clusterPort is a loopback port that is free and whose bus port is free
// too, both below the kernel's ephemeral range when it leaves room: there
// no outgoing connection takes either between this check and the node's
// bind (on a busy machine thousands of ephemeral ports are in use).
func clusterPort() (string, error) {
	const lowest = 20000
	top := ephemeralLow() - clusterBusOffset
	if top-lowest < 1000 {
		top = 65535 - clusterBusOffset
	}
	for range 100 {
		p := lowest + rand.IntN(top-lowest)
		if portFree(p) && portFree(p+clusterBusOffset) {
			return strconv.Itoa(p), nil
		}
	}
	return "", errors.New("redis cluster: no free port with a free bus port")
}

func portFree(p int) bool {
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	const linux = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linux
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return linux
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return linux
	}
	return lo
}

// join splits the slots, introduces every node to the first and waits for
// cluster_state:ok everywhere.
func (c *RedisCluster) join() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, _, _ := net.SplitHostPort(c.Nodes[0].Addr)
	for i, r := range c.Nodes {
		cl := r.Client()
		lo, hi := i*clusterSlots/len(c.Nodes), (i+1)*clusterSlots/len(c.Nodes)-1
		err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err()
		if err == nil && i > 0 {
			_, port, _ := net.SplitHostPort(c.Nodes[0].Addr)
			err = cl.ClusterMeet(ctx, first, port).Err()
		}
		cl.Close()
		if err != nil {
			return fmt.Errorf("redis cluster: node %s: %w", r.Addr, err)
		}
	}
	ok := Until(30*time.Second, func() bool {
		for _, r := range c.Nodes {
			cl := r.Client()
			info, err := cl.ClusterInfo(ctx).Result()
			cl.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	if !ok {
		return errors.New("redis cluster: not cluster_state:ok within 30s")
	}
	return nil
}

// Addrs are the nodes' addresses, the seeds of a cluster client.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, r := range c.Nodes {
		out[i] = r.Addr
	}
	return out
}

// Client is a new cluster client; the caller closes it.
func (c *RedisCluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
}

// Kill ends every node.
func (c *RedisCluster) Kill() {
	for _, r := range c.Nodes {
		r.Kill()
	}
}
