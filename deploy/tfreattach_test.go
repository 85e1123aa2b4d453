package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// startMirrorProviders starts each provider of the mirror pluginDir (the
// layout terraform init -plugin-dir reads:
// HOST/NAMESPACE/TYPE/VERSION/OS_ARCH/terraform-provider-TYPE_*) once, in
// its debug mode, and returns the TF_REATTACH_PROVIDERS value that has
// terraform use those processes instead of starting its own.
//
// Why: terraform validate and terraform test start the provider afresh
// for every operation: 34 starts of the AWS provider (a 650 MB binary that
// registers thousands of resources at start-up, ~1 CPU s each) for the
// example's 11 run blocks, ~85 of TestTerraformValidateAndTest's ~100 CPU
// seconds. Reattached, the same binary answers the same gRPC calls (its
// schema and its validation of every resource; mock_provider stands in
// for plan and apply either way) from one process: ~30 CPU s for the test.
// terraform init still installs the provider from the mirror, so the
// version constraints and the lock file are checked as before.
//
// It returns "" (terraform then starts the providers itself, as before)
// when the mirror holds two versions of one provider or a provider does
// not say how to reattach within 30 s; the reason is logged.
func startMirrorProviders(t *testing.T, pluginDir string) string {
	t.Helper()
	bins, err := filepath.Glob(filepath.Join(pluginDir, "*", "*", "*", "*", runtime.GOOS+"_"+runtime.GOARCH, "terraform-provider-*"))
	if err != nil || len(bins) == 0 {
		t.Logf("no provider binaries for %s_%s in %s: terraform starts its own", runtime.GOOS, runtime.GOARCH, pluginDir)
		return ""
	}
	seen := map[string]bool{}
	for _, b := range bins {
		rel, _ := filepath.Rel(pluginDir, b)
		addr := strings.Join(strings.Split(filepath.ToSlash(rel), "/")[:3], "/")
		if seen[addr] {
			t.Logf("%s: two versions in %s: terraform starts its own providers", addr, pluginDir)
			return ""
		}
		seen[addr] = true
	}
	all := map[string]json.RawMessage{}
	for _, b := range bins {
		one, err := startDebugProvider(t, b)
		if err != nil {
			t.Logf("%s: %v: terraform starts its own providers", b, err)
			return ""
		}
		for k, v := range one {
			all[k] = v
		}
	}
	out, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// startDebugProvider runs one provider binary with -debug (terraform-plugin-go's
// managed debug mode), reads the reattach configuration it prints, and
// stops it (SIGINT, then SIGKILL after 10 s) when the test ends.
func startDebugProvider(t *testing.T, bin string) (map[string]json.RawMessage, error) {
	cmd := exec.Command(bin, "-debug") //nolint:noctx // stopped by the cleanup below, with an interrupt first
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var tail strings.Builder
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		sent := false
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if v, ok := strings.CutPrefix(line, "TF_REATTACH_PROVIDERS='"); ok && !sent {
				found <- strings.TrimSuffix(v, "'")
				sent = true
			} else if !sent && tail.Len() < 4096 {
				tail.WriteString(line + "\n")
			}
		}
		close(found)
		_, _ = io.Copy(io.Discard, pr) // a line too long for the scanner: keep the provider's writes from blocking
	}()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // stopped by the cleanup: its exit status says nothing
		pw.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt) // an error: it has exited already
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	select {
	case v, ok := <-found:
		if !ok {
			return nil, fmt.Errorf("exited without a TF_REATTACH_PROVIDERS line:\n%s", tail.String())
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			return nil, fmt.Errorf("TF_REATTACH_PROVIDERS %q: %w", v, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("TF_REATTACH_PROVIDERS %q names no provider", v)
		}
		return m, nil
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("no TF_REATTACH_PROVIDERS line within 30 s")
	}
}
