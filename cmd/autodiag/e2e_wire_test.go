package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/agent/instance"
	"github.com/autodiag/autodiag/internal/fake/awssecretsfake"
	"github.com/autodiag/autodiag/internal/harness"
	"github.com/autodiag/autodiag/internal/outcome"
	"github.com/autodiag/autodiag/internal/testenv"
)

// How start and stop are bounded in these tests: a start ends with the
// "ready" line (startProc allows 30 s); a stop with nothing running is the
// admin server's shutdown bound plus the process's own exit.
const stopBound = admin.ShutdownTimeout + 2*time.Second

func randHex(t *testing.T) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// closedLoopbackURL is an http URL on loopback where nothing listens
// (testenv.ClosedPort: no client dialling it can connect to itself).
func closedLoopbackURL(t *testing.T) string {
	t.Helper()
	return "http://127.0.0.1:" + testenv.ClosedPort(t)
}

// TestInstanceIDRequiredBySQSSource: with the sqs lifecycle source, an
// empty instance_id and no id to discover, `run` exits 2 and `doctor`
// fails its instance id line, both saying how to set it; `config validate`
// is offline: it warns, exits 0 and never reaches instance metadata. An id
// from cloud-init's file or the environment is enough.
func TestInstanceIDRequiredBySQSSource(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, `
admin_addr: 127.0.0.1:0
lifecycle:
  sources: [signal, sqs]
  queue_url: `+closedLoopbackURL(t)+`/123456789012/autodiag-lifecycle
  hook_name: autodiag-drain
`)
	nowhere := []string{
		envCloudInitPath + "=" + filepath.Join(dir, "no-cloud-init"),
		envDMIPath + "=" + filepath.Join(dir, "no-asset-tag"),
		"AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret", "AWS_REGION=us-east-1",
	}
	// Instance metadata, on loopback, counts who asks and refuses them all.
	var imdsAsked atomic.Int64
	imdsSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		imdsAsked.Add(1)
		w.WriteHeader(http.StatusForbidden)
	}))
	defer imdsSrv.Close()
	imdsRefused := "AWS_EC2_METADATA_SERVICE_ENDPOINT=" + imdsSrv.URL
	imdsOff := "AWS_EC2_METADATA_DISABLED=true"
	cloudInit := filepath.Join(dir, "instance-id")
	if err := os.WriteFile(cloudInit, []byte("i-0123456789abcdef0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  []string
		code int
	}{
		{"validate, nothing found", []string{"config", "validate"}, append([]string{imdsRefused}, nowhere...), exitOK},
		{"doctor, nothing found", []string{"doctor"}, append([]string{imdsRefused}, nowhere...), exitRuntime},
		{"run, nothing found", []string{"run"}, append([]string{imdsOff}, nowhere...), exitUsage},
		{"validate, cloud-init", []string{"config", "validate"},
			append([]string{imdsOff}, append(nowhere, envCloudInitPath+"="+cloudInit)...), exitOK},
		{"validate, environment", []string{"config", "validate"},
			append([]string{imdsOff, "AUTODIAG_INSTANCE_ID=i-0fedcba9876543210"}, nowhere...), exitOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asked := imdsAsked.Load()
			code, stdout, stderr := runCLIWithin(t, startBound, tc.env, append(tc.args, "--config", cfg)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			said := stderr
			switch tc.name {
			case "validate, nothing found":
				if n := imdsAsked.Load() - asked; n != 0 {
					t.Errorf("config validate asked instance metadata %d times; it is offline", n)
				}
				if !strings.Contains(stderr, "warning: instance_id is empty") || !strings.Contains(stderr, "autodiag doctor") {
					t.Errorf("no warning that points to doctor:\n%s", stderr)
				}
			case "doctor, nothing found":
				said = stdout
				if imdsAsked.Load() == asked {
					t.Error("doctor did not ask instance metadata")
				}
				if !strings.Contains(stdout, "FAIL  instance id") || !strings.Contains(stdout, "FAIL  imds") || !strings.Contains(stdout, "SKIP  redis") {
					t.Errorf("doctor's lines:\n%s", stdout)
				}
			}
			if tc.code != exitOK || tc.name == "validate, nothing found" {
				for _, want := range []string{"instance_id", "AUTODIAG_INSTANCE_ID", "cloud-init", "no-asset-tag"} {
					if !strings.Contains(said, want) {
						t.Errorf("output does not say %q:\n%s", want, said)
					}
				}
			}
		})
	}
}

// startBound bounds a start that is to fail: discovery's instance
// metadata bound and room for the rest.
const startBound = instance.DefaultIMDSTimeout + 10*time.Second

// runCLIWithin is runCLI for a command that may not end by itself (an
// agent that starts when it should have refused): it is killed at bound.
func runCLIWithin(t *testing.T, bound time.Duration, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	code, stdout, stderr, err := harness.Run(ctx, binPath, t.TempDir(), env, args...)
	if ctx.Err() != nil {
		t.Fatalf("%v still running after %s\nstderr: %s", args, bound, harness.LastLines(stderr, 20))
	}
	if err != nil {
		t.Fatal(err)
	}
	return code, stdout, stderr
}

// TestRedisURLFromSecret: the agent reads redis.url_secret with the SDK
// (Secrets Manager or SSM through AWS_ENDPOINT_URL_*), reaches Redis
// through that URL, and never writes the value (its password) to stderr,
// not even when the value is not a valid URL.
func TestRedisURLFromSecret(t *testing.T) {
	addr := testenv.RedisAddr(t)
	rc, prefix := sqsRedis(t)
	fake := awssecretsfake.New()
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	env := []string{"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + srv.URL, "AWS_ENDPOINT_URL_SSM=" + srv.URL}
	// Redis's default user has no password (nopass), so it accepts any: the
	// password is a marker that must appear nowhere in the logs.
	password := "pw-" + randHex(t)
	url := "redis://default:" + password + "@" + addr + "/0"

	for _, tc := range []struct{ name, ref string }{
		{"secretsmanager", fake.PutSecretString("autodiag/redis-url", url)},
		{"ssm", "/autodiag/redis-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "ssm" {
				fake.PutParameter(tc.ref, url, true)
			}
			id := "secret-" + tc.name
			p := startProc(t, fmt.Sprintf("admin_addr: 127.0.0.1:0\ninstance_id: %s\nredis:\n  url_secret: %q\n  prefix: %q\n", id, tc.ref, prefix),
				env...)
			if up, _ := p.status()["redis_up"].(bool); !up {
				t.Fatalf("redis_up = %v; want true", p.status()["redis_up"])
			}
			eventually(t, 10*time.Second, "the instance record in Redis", func() bool {
				n, _ := rc.Exists(context.Background(), prefix+"instance:"+id).Result()
				return n == 1
			})
			p.signal(syscall.SIGTERM)
			if code := p.wait(stopBound); code != 0 {
				t.Fatalf("exit %d after SIGTERM", code)
			}
			raw := p.Output()
			if strings.Contains(raw, password) {
				t.Fatalf("stderr holds the secret's password:\n%s", raw)
			}
		})
	}

	t.Run("invalid URL", func(t *testing.T) {
		bad := fake.PutSecretString("autodiag/bad-url", "redis://default:"+password+"@[::1/0")
		cfg := writeConfig(t, fmt.Sprintf("admin_addr: 127.0.0.1:0\ninstance_id: bad\nredis:\n  url_secret: %q\n", bad))
		code, stdout, stderr := runCLIWithin(t, startBound, append(env, "AWS_ACCESS_KEY_ID=AKIDTEST", "AWS_SECRET_ACCESS_KEY=secret",
			"AWS_REGION=us-east-1", "AWS_EC2_METADATA_DISABLED=true"), "run", "--config", cfg)
		if code == exitOK || !strings.Contains(stderr, "redis.url_secret") {
			t.Fatalf("exit %d; want a failure naming redis.url_secret\nstdout: %s\nstderr: %s", code, stdout, stderr)
		}
		if strings.Contains(stderr+stdout, password) {
			t.Fatalf("output holds the secret's password:\n%s%s", stdout, stderr)
		}
	})

	calls := fake.Calls()
	var targets []string
	for _, c := range calls {
		targets = append(targets, c.Target+" "+c.ID)
	}
	if len(calls) != 3 || calls[0].Target != awssecretsfake.TargetGetSecretValue ||
		calls[1].Target != awssecretsfake.TargetGetParameter || !calls[1].WithDecryption {
		t.Fatalf("calls = %v; want GetSecretValue, GetParameter with decryption, GetSecretValue", targets)
	}
}

// TestRedisOutageLogsJSONOnly: with Redis unreachable, go-redis's own
// complaints (dial failures) come out as JSON log lines like the rest.
func TestRedisOutageLogsJSONOnly(t *testing.T) {
	down := strings.TrimPrefix(closedLoopbackURL(t), "http://")
	p := startProc(t, "admin_addr: 127.0.0.1:0\ninstance_id: outage\nredis:\n  url: redis://"+down+"/0\n")
	eventually(t, 10*time.Second, "a go-redis log line", func() bool {
		for _, l := range p.logsWhere("msg", "redis client", "component", "redis") {
			if d, _ := l["detail"].(string); strings.Contains(d, "dial") {
				return true
			}
		}
		return false
	})
	p.signal(syscall.SIGTERM)
	p.wait(30 * time.Second)
	raw := p.Output()
	for i, line := range strings.Split(strings.TrimRight(raw, "\n"), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("stderr line %d is not JSON: %q", i+1, line)
		}
	}
}

// fdCount is how many descriptors pid holds.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestAdminSlowClientsBounded: clients that send headers and then trickle
// nothing of the body they announced cost the agent at most
// AdminMaxConns descriptors however many there are, and do not hold its
// exit past AdminShutdownTimeout.
func TestAdminSlowClientsBounded(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc: descriptors cannot be counted")
	}
	p := startProc(t, "admin_addr: 127.0.0.1:0\ninstance_id: slow-clients\n")
	pid := p.Pid()
	base := fdCount(t, pid)
	const clients = 4 * admin.MaxConns
	req := "POST /v1/tasks HTTP/1.1\r\nHost: agent\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{"
	for range clients {
		c, err := new(net.Dialer).DialContext(t.Context(), "tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
	}
	limit := base + admin.MaxConns
	eventually(t, 10*time.Second, "the cap's connections accepted", func() bool { return fdCount(t, pid) >= limit })
	// The rest wait in the backlog: the count stays at the cap while they
	// are there (sampled, since no event marks "not accepted").
	for range 100 {
		if n := fdCount(t, pid); n > limit {
			t.Fatalf("agent holds %d descriptors with %d slow clients; want at most %d (%d before + AdminMaxConns)", n, clients, limit, base)
		}
	}
	start := time.Now()
	p.signal(syscall.SIGTERM)
	if code := p.wait(stopBound); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	t.Logf("exit %.2fs after SIGTERM with %d slow clients (bound %s)", time.Since(start).Seconds(), clients, stopBound)
}

// TestSetsidDiagnosticBounded: a diagnostic whose background descendant
// calls setsid and holds the output pipe never outlives its run. When the
// shell exits at once, the run ends with it (the runner ends what the
// leader left behind, so nothing keeps the pipe open); when the shell
// keeps running, the run ends timed_out at its timeout. Either way a drain
// begun meanwhile ends with the run (exit 0) and no sleep survives.
func TestSetsidDiagnosticBounded(t *testing.T) {
	const timeout = 2 * time.Second
	// killGrace is runner.Runner's default KillGrace, which the agent uses:
	// the longest a killed process group may take past the timeout.
	const killGrace = 5 * time.Second
	for _, tc := range []struct {
		name, script string
		outcome      string
		minRun       time.Duration // the run lasts from minRun ...
		maxRun       time.Duration // ... to maxRun
	}{
		{"leader exits", "setsid sleep %s & echo started", outcome.Succeeded, 0, timeout},
		{"leader stays", "setsid sleep %s & echo started; sleep 30", outcome.TimedOut, timeout, timeout + killGrace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A fractional, random duration names this run's sleep in /proc.
			secs := "60." + strconv.Itoa(int(time.Now().UnixNano()%1_000_000))
			p := startProc(t, fmt.Sprintf(`
admin_addr: 127.0.0.1:0
instance_id: setsid
diagnostics:
  - name: escape
    command: [/bin/sh, -c, '%s', sh]
    timeout: %s
limiter:
  hosts:
    allow: ['^[a-z0-9.-]+$']
`, fmt.Sprintf(tc.script, secs), timeout))
			if code, out := p.post("/v1/tasks", `{"id":"escape-1","host":"web-01","diagnostic":"escape"}`); code != http.StatusAccepted {
				t.Fatalf("POST = %d %v", code, out)
			}
			eventually(t, 10*time.Second, "the task running or ended", func() bool {
				return len(sleepers(t, secs)) > 0 || len(p.logs("task ended")) > 0
			})
			stop := time.Now()
			p.signal(syscall.SIGTERM)
			if code := p.wait(tc.maxRun + stopBound); code != 0 {
				t.Fatalf("exit %d after SIGTERM", code)
			}
			t.Logf("exit %.2fs after SIGTERM", time.Since(stop).Seconds())
			ended := p.logsWhere("msg", "task ended", "task_id", "escape-1")
			if len(ended) != 1 || ended[0]["outcome"] != tc.outcome {
				t.Fatalf("task ended lines = %v; want one %s", ended, tc.outcome)
			}
			if d, _ := ended[0]["duration"].(float64); d < tc.minRun.Seconds() || d > tc.maxRun.Seconds() {
				t.Errorf("ran %gs; want %s to %s", d, tc.minRun, tc.maxRun)
			}
			if pids := sleepers(t, secs); len(pids) > 0 {
				t.Fatalf("the diagnostic's setsid sleep survives: pids %v", pids)
			}
		})
	}
}

// sleepers lists the processes running `sleep secs`.
func sleepers(t *testing.T, secs string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skip("no /proc")
	}
	want := []byte("sleep\x00" + secs + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if bytes.Equal(cmdline, want) || bytes.HasSuffix(cmdline, append([]byte("/"), want...)) {
			if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
				continue // a zombie is not a survivor
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestLimitsCheckValidatesHost: `limits check` judges the host as the
// agent does: an IP literal only with allow_ip_literals, the instance
// metadata address never.
func TestLimitsCheckValidatesHost(t *testing.T) {
	optIn := writeConfig(t, "limiter:\n  hosts:\n    allow: ['^[0-9.]+$']\n    allow_ip_literals: true\n")
	tests := []struct {
		name, host, config string
		code               int
		inErr              string
	}{
		// A host that passes goes on to ask the agent's limiter (embedded
		// mode), which no agent at the --admin-addr below answers.
		{"ip literal off", "10.1.2.3", "", exitUsage, "ip_literal_not_allowed"},
		{"ip literal opted in", "10.1.2.3", optIn, 1, "local agent did not answer"},
		{"metadata address opted in", "169.254.169.254", optIn, exitUsage, "host_forbidden"},
		{"allowed name", "web-01", "", 1, "local agent did not answer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"limits", "check", "--host", tc.host, "--diagnostic", "uptime", "--admin-addr", "127.0.0.1:1"}
			if tc.config != "" {
				args = append(args, "--config", tc.config)
			}
			code, stdout, stderr := runCLI(t, nil, args...)
			if code != tc.code || !strings.Contains(stderr, tc.inErr) {
				t.Fatalf("exit %d, want %d with %q\nstdout: %s\nstderr: %s", code, tc.code, tc.inErr, stdout, stderr)
			}
		})
	}
}
