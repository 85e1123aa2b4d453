package runner

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOutputPipe: the read end takes a deadline (the run's output stops
// being read at the timeout), the write end the diagnostic gets is
// blocking (a full pipe makes it wait, not fail), and neither leaks into
// other children.
func TestOutputPipe(t *testing.T) {
	r, w, err := outputPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := r.SetReadDeadline(time.Now().Add(time.Millisecond)); err != nil {
		t.Fatalf("read end: SetReadDeadline = %v", err)
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read end: Read with nothing written = %v, want the deadline", err)
	}
	for _, f := range []*os.File{r, w} {
		fdFlags, err := unix.FcntlInt(f.Fd(), syscall.F_GETFD, 0)
		if err != nil {
			t.Fatal(err)
		}
		if fdFlags&syscall.FD_CLOEXEC == 0 {
			t.Errorf("%s: not close-on-exec", f.Name())
		}
	}
	flags, err := unix.FcntlInt(w.Fd(), syscall.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if flags&syscall.O_NONBLOCK != 0 {
		t.Error("write end: non-blocking")
	}
}
