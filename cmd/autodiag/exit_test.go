package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/supervisor"
)

// TestExitStatusMapping: what `autodiag run` exits with for each way the
// agent's Run ends (the unit restarts on 75 and 1, never on 0 and 2).
func TestExitStatusMapping(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		runErr error
		ending supervisor.Ending
		want   int
	}{
		{"lifecycle action ended, spot notice or signal", nil, supervisor.EndingDone, exitOK},
		{"drained for another reason", nil, supervisor.EndingDrained, exitDrained},
		{"second signal", supervisor.ErrFastExit, supervisor.EndingDrained, exitRuntime},
		{"second signal before any drain", supervisor.ErrFastExit, supervisor.EndingNone, exitRuntime},
		{"completion failed", fmt.Errorf("%w: throttled", supervisor.ErrCompletionFailed), supervisor.EndingDone, exitRuntime},
		{"bad configuration", usageError{errors.New("workers: must be positive")}, supervisor.EndingNone, exitUsage},
	} {
		// As runAgent ends: Run's error, else how the drain ended.
		result := tc.runErr
		if result == nil {
			result = endingResult(tc.ending)
		}
		if got := exitCode(result); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestNotifyReadyAndStopping: with NOTIFY_SOCKET set (systemd's
// Type=notify), the binary sends READY=1 once its admin API answers and
// STOPPING=1 when a drain starts; a drain by POST /v1/drain then exits 75
// so that the unit starts the agent again.
func TestNotifyReadyAndStopping(t *testing.T) {
	t.Parallel()
	// sun_path holds 108 bytes; t.TempDir's path can be longer.
	dir, err := os.MkdirTemp("", "sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	msgs := make(chan string, 8)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	next := func(want string) {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok || !strings.Contains(m, want) {
				t.Fatalf("notify message %q (open %v), want %s", m, ok, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s on NOTIFY_SOCKET", want)
		}
	}

	p := startProc(t, embeddedConfig, "NOTIFY_SOCKET="+sock)
	next("READY=1")
	if code := p.getCode("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d after READY=1", code)
	}
	if code, _ := p.post("/v1/drain", ""); code != http.StatusAccepted {
		t.Fatalf("POST /v1/drain = %d", code)
	}
	next("STOPPING=1")
	if code := p.wait(60 * time.Second); code != exitDrained {
		t.Fatalf("exit code %d after POST /v1/drain, want %d", code, exitDrained)
	}
}
