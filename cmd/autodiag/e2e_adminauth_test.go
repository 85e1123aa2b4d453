package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/admin"
	"github.com/autodiag/autodiag/internal/outcome"
)

const adminTokenEnv = "AUTODIAG_TEST_ADMIN_TOKEN"

// adminAuthConfig is embeddedConfig listening on every interface, behind
// a bearer token.
var adminAuthConfig = strings.Replace(embeddedConfig, "admin_addr: 127.0.0.1:0\n",
	"admin_addr: 0.0.0.0:0\nadmin_auth: {bearer_token_env: "+adminTokenEnv+"}\n", 1)

// TestE2EAdminAuth: an agent whose admin API listens on every interface
// answers 401 to requests without the token, except the probes, accepts
// a task with it, and the CLI sends it from the variable admin_auth names.
func TestE2EAdminAuth(t *testing.T) {
	const token = "admin-s3cret"
	p := startProc(t, adminAuthConfig, adminTokenEnv+"="+token)
	_, port, err := net.SplitHostPort(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if host, _, _ := net.SplitHostPort(p.Addr()); net.ParseIP(host).IsLoopback() {
		t.Fatalf("admin listens on %s; want every interface", p.Addr())
	}
	// Every interface includes loopback, where the test's traffic stays.
	local := net.JoinHostPort("127.0.0.1", port)
	call := func(method, path, body, auth string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+local+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, resp.Header, b.String()
	}
	const task = `{"id":"auth-1","host":"web-01.example.com","diagnostic":"uptime"}`
	for _, auth := range []string{"", "Bearer wrong", "Basic " + token} {
		code, h, body := call(http.MethodPost, "/v1/tasks", task, auth)
		if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer ") {
			t.Fatalf("POST /v1/tasks with Authorization %q = %d (WWW-Authenticate %q) %s; want 401 with a Bearer challenge",
				auth, code, h.Get("WWW-Authenticate"), body)
		}
	}
	if code, _, _ := call(http.MethodGet, "/metrics", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /metrics without the token = %d; want 401", code)
	}
	if code, _, _ := call(http.MethodGet, "/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("GET /healthz without the token = %d; want 200", code)
	}
	if code, _, body := call(http.MethodPost, "/v1/tasks", task, "Bearer "+token); code != http.StatusAccepted || !strings.Contains(body, `"auth-1"`) {
		t.Fatalf("POST /v1/tasks with the token = %d %s; want 202 auth-1", code, body)
	}
	p.awaitLogsWhere("msg", "task ended", "task_id", "auth-1", "outcome", outcome.Succeeded)

	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(adminAuthConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, []string{adminTokenEnv + "=" + token}, "status", "--config", cfgPath, "--admin-addr", local)
	var st admin.Status
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil || st.Outcomes[outcome.Succeeded] != 1 {
		t.Fatalf("status with the token: exit %d, stdout %q, stderr %q; want 0 and the agent's status with auth-1 succeeded", code, stdout, stderr)
	}
	code, _, stderr = runCLI(t, nil, "status", "--config", cfgPath, "--admin-addr", local)
	if code != 2 || !strings.Contains(stderr, "admin_auth.bearer_token_env: environment variable "+adminTokenEnv+" is unset") {
		t.Fatalf("status without the variable: exit %d, stderr %q; want 2 naming admin_auth.bearer_token_env", code, stderr)
	}
	code, _, stderr = runCLI(t, []string{adminTokenEnv + "=wrong"}, "status", "--config", cfgPath, "--admin-addr", local)
	if code == 0 || !strings.Contains(stderr, "401") {
		t.Fatalf("status with a wrong token: exit %d, stderr %q; want a failure saying 401", code, stderr)
	}
	code, _, stderr = runCLI(t, []string{adminTokenEnv + "=" + token}, "drain", "--config", cfgPath, "--admin-addr", local)
	if code != 0 {
		t.Fatalf("drain with the token: exit %d, stderr %q", code, stderr)
	}
	// A drain asked for over the admin API, with no termination, leaves
	// the instance: the agent exits exitDrained so it is started again.
	p.awaitLogsWhere("msg", "drain started", "source", "admin")
	if code := p.wait(30 * time.Second); code != exitDrained {
		t.Fatalf("agent exit %d after the drain; want %d", code, exitDrained)
	}
}

// TestE2EAdminAddrRefusedWithoutAuth: an admin API reachable from other
// hosts without admin_auth, or with its variable unset, does not start
// (exit 2, naming the key).
func TestE2EAdminAddrRefusedWithoutAuth(t *testing.T) {
	open := strings.Replace(embeddedConfig, "admin_addr: 127.0.0.1:0\n", "admin_addr: 0.0.0.0:0\n", 1)
	openPath := filepath.Join(t.TempDir(), "open.yaml")
	authPath := filepath.Join(t.TempDir(), "auth.yaml")
	for path, yaml := range map[string]string{openPath: open, authPath: adminAuthConfig} {
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const notLoopback = `admin_addr (line 2): "0.0.0.0:0" is reachable from other hosts: set admin_auth`
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"run", nil, []string{"run", "--config", openPath}, notLoopback},
		{"intake", nil, []string{"intake", "--config", openPath}, notLoopback},
		{"config validate", nil, []string{"config", "validate", "--config", openPath}, notLoopback},
		{"run, loopback in the file, not in the environment", []string{"AUTODIAG_ADMIN_ADDR=0.0.0.0:0"},
			[]string{"run", "--config", filepath.Join("..", "..", "deploy", "config", "example.yaml")}, "(set by AUTODIAG_ADMIN_ADDR)"},
		{"run, token variable unset", nil, []string{"run", "--config", authPath}, "admin_auth.bearer_token_env: environment variable " + adminTokenEnv + " is unset"},
		{"intake, token variable unset", nil, []string{"intake", "--config", authPath}, "admin_auth.bearer_token_env: environment variable " + adminTokenEnv + " is unset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.env, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 saying %q", code, stderr, tc.want)
			}
		})
	}
}
