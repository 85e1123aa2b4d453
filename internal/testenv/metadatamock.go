package testenv

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/fake/imdsmock"
)

// StartMetadataMock runs AWS's ec2-metadata-mock with args on a free
// loopback port (imdsmock.Start), stops it when tb ends, and returns its
// URL once it hands out IMDSv2 tokens, along with when the process was
// started (the mock's own delays count from then). Its output is logged
// when tb fails; tb fails at once, with that output, if the mock exits
// before tb ends (MetadataMock).
func StartMetadataMock(tb testing.TB, args ...string) (string, time.Time) {
	tb.Helper()
	m := MetadataMock(tb, args...)
	return m.URL, m.Started
}

// MetadataMock is StartMetadataMock returning the mock itself, for a test
// that stops waiting when it dies (Mock.Exited, Mock.Died).
func MetadataMock(tb testing.TB, args ...string) *imdsmock.Mock {
	tb.Helper()
	bin := EC2MetadataMock(tb)
	var out LockedBuffer
	m, err := imdsmock.Start(tb.Context(), bin, tb.TempDir(), &out, args...)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	stop, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-m.Exited():
			tb.Errorf("%v", m.Died())
		case <-stop:
		}
	}()
	tb.Cleanup(func() {
		close(stop)
		<-watched
		m.Stop()
		if tb.Failed() {
			tb.Logf("ec2-metadata-mock output:\n%s", out.String())
		}
	})
	return m
}

// ClosedPort is imdsmock.ClosedPort: a loopback port nothing listens on,
// below the kernel's ephemeral range.
func ClosedPort(tb testing.TB) string {
	tb.Helper()
	p, err := imdsmock.ClosedPort(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	return p
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
