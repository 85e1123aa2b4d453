package imdsmock_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/fake/imdsmock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestMockTakesConcurrentTokens: token PUTs beside reads with a kept token
// (the e2e lab's 5 ms poll beside the agent's SDK) all answer, and the
// mock lives. ec2-metadata-mock v1.13.0 reached directly dies of them
// ("fatal error: concurrent map read and map write", its token map).
func TestMockTakesConcurrentTokens(t *testing.T) {
	m := testenv.MetadataMock(t, "asglifecycle", "--imdsv2", "--asg-termination-delay-sec", "3600")
	ctx := t.Context()
	tok, err := imdsmock.Token(ctx, m.URL)
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 100
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for range workers {
		wg.Go(func() {
			for range each {
				if _, err := imdsmock.Token(ctx, m.URL); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() {
			for range each {
				if err := getState(ctx, m.URL, tok); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := m.Died(); err != nil {
		t.Fatal(err)
	}
}

func getState(ctx context.Context, base, tok string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/latest/meta-data/autoscaling/target-lifecycle-state", nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-aws-ec2-metadata-token", tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK || string(b) != "InService" {
		return &stateErr{resp.Status, string(b)}
	}
	return nil
}

type stateErr struct{ status, body string }

func (e *stateErr) Error() string { return "target-lifecycle-state: " + e.status + ": " + e.body }

// TestMockDeathIsLoud: a mock that dies is said to have (Died, with its
// exit and output), and its URL answers 502 with that instead of refusing
// connections.
func TestMockDeathIsLoud(t *testing.T) {
	bin := testenv.EC2MetadataMock(t)
	m, err := imdsmock.Start(t.Context(), bin, t.TempDir(), io.Discard, "asglifecycle", "--imdsv2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	if err := m.Died(); err != nil {
		t.Fatalf("running mock: Died %v", err)
	}
	if err := syscall.Kill(m.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Exited():
	case <-time.After(10 * time.Second):
		t.Fatal("killed mock did not exit within 10 s")
	}
	if err := m.Died(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Died %v; want the mock's end (killed)", err)
	}
	_, err = imdsmock.Token(t.Context(), m.URL)
	if err == nil || !strings.Contains(err.Error(), "502") {
		t.Fatalf("token from a dead mock: %v; want 502", err)
	}
}

// TestStartSaysWhyTheMockExited: a mock that exits before it listens
// fails Start with its own output, not only a count of attempts.
func TestStartSaysWhyTheMockExited(t *testing.T) {
	bin := testenv.EC2MetadataMock(t)
	_, err := imdsmock.Start(t.Context(), bin, t.TempDir(), io.Discard, "no-such-mode")
	if err == nil || !strings.Contains(err.Error(), `unknown command "no-such-mode"`) {
		t.Fatalf("Start with a bad flag: %v; want the mock's complaint about it", err)
	}
}
