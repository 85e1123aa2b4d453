package harness

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

// Toxiproxy is a toxiproxy-server driven through its HTTP API.
type Toxiproxy struct {
	API  string
	proc *Process
}

// StartToxiproxy runs the toxiproxy-server binary bin on a free loopback
// port and waits until its API answers.
func StartToxiproxy(bin string) (*Toxiproxy, error) {
	if bin == "" {
		return nil, errors.New("toxiproxy-server not given (-toxiproxy; scripts/chaos.sh installs it)")
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	p, err := StartProcess(exec.CommandContext(context.Background(), bin, "-host", host, "-port", port))
	if err != nil {
		return nil, err
	}
	t := &Toxiproxy{API: "http://" + addr, proc: p}
	if !Until(10*time.Second, func() bool { _, err := t.Do(http.MethodGet, "/version", ""); return err == nil }) {
		p.KillTree()
		return nil, errors.New("toxiproxy-server did not answer within 10s")
	}
	return t, nil
}

// Stop kills the server.
func (t *Toxiproxy) Stop() { t.proc.KillTree() }

// Do calls the API and returns the answer's body.
func (t *Toxiproxy) Do(method, path, body string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := HTTPDo(ctx, nil, method, t.API+path, body)
	if err != nil {
		return "", fmt.Errorf("toxiproxy: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		return "", fmt.Errorf("toxiproxy %s %s: %s %s", method, path, resp.Status, b)
	}
	return strings.TrimSpace(string(b)), nil
}
