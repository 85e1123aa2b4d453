package testenv

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// BuildLockEnv names the lock file scripts/test.sh holds while it builds,
// in the background, what the tests need beside the module: the agent with
// the release's settings (harness.Build links it from the build cache
// afterwards) and ec2-metadata-mock. go test compiles the tests meanwhile,
// so a test that needs either waits here instead of compiling the agent a
// second time (two go commands building the same packages at once both
// compile them) or finding no mock binary.
const BuildLockEnv = "AUTODIAG_TEST_BUILD_LOCK"

// WaitForBuilds returns once the builds scripts/test.sh started in the
// background have ended (or at once, outside scripts/test.sh). It waits on
// the lock (flock), not on a timer: the builder releases it when it is
// done, or by exiting, whatever the outcome; go test's -timeout bounds it.
func WaitForBuilds() error {
	path := os.Getenv(BuildLockEnv)
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s=%s: %w", BuildLockEnv, path, err)
	}
	defer f.Close()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("waiting for scripts/test.sh's builds (%s): %w", path, err)
	}
	// Closing the file releases the shared lock.
	return nil
}
