package runner

import (
	"os"
	"syscall"
)

// outputPipe returns a run's output pipe: a read end the agent polls, so
// that its reads have a deadline, and a blocking write end for the
// diagnostic that the agent never polls. os.Pipe would make both ends
// non-blocking and register both with the poller, and os/exec would make
// the write end blocking again when it hands it over: four system calls
// of the few dozen a run costs the agent, for nothing.
func outputPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if err := syscall.SetNonblock(p[0], true); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}
