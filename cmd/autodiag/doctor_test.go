package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/autodiag/autodiag/agent/config"
	rootcause "github.com/autodiag/autodiag/agent/report"
	"github.com/autodiag/autodiag/internal/testenv"
)

// TestDoctorLines: each dependency the config names gets one line, PASS
// or FAIL from one call, and each it does not name a SKIP with why; the
// model endpoint is asked with the configured key.
func TestDoctorLines(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("DOCTOR_TEST_KEY", "sk-test")
	var auth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"data":[{"id":"m1"}]}`))
	}))
	defer srv.Close()

	cfg := config.DefaultConfig()
	cfg.InstanceID = "i-0123456789abcdef0"
	cfg.Redis.URL = "redis://127.0.0.1:" + testenv.ClosedPort(t) + "/0"
	cfg.Report.Enabled, cfg.Report.Provider, cfg.Report.BaseURL, cfg.Report.APIKeyEnv =
		true, rootcause.ProviderOpenAI, srv.URL+"/v1", "DOCTOR_TEST_KEY"
	for _, tc := range []struct {
		model string
		want  []string
	}{
		{"m1", []string{"PASS instance id", "SKIP imds", "FAIL redis", "SKIP queue", "SKIP lifecycle hook", "SKIP s3", "PASS model endpoint"}},
		{"absent", []string{"FAIL model endpoint"}},
	} {
		cfg.Report.Model = tc.model
		var out bytes.Buffer
		c := &cli{stdout: &out, stderr: &out}
		got := map[string]string{}
		for _, ch := range c.doctor(t.Context(), cfg) {
			switch {
			case ch.skip != "":
				got[ch.name] = "SKIP"
			case ch.err != nil:
				got[ch.name] = "FAIL"
			default:
				got[ch.name] = "PASS"
			}
		}
		for _, w := range tc.want {
			status, name, _ := strings.Cut(w, " ")
			if got[name] != status {
				t.Errorf("model %s: %s is %s, want %s (all: %v)", tc.model, name, got[name], status, got)
			}
		}
	}
	if len(auth) != 2 || auth[0] != "Bearer sk-test" {
		t.Errorf("model endpoint asked %d times with %q, want twice with the key", len(auth), auth)
	}
}

// TestDoctorAdminPort: doctor fails when the admin address is taken (a
// second agent would exit 1 right after starting) and passes when it is
// free.
func TestDoctorAdminPort(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	held, err := new(net.ListenConfig).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, tc := range []struct {
		name, addr, want string
	}{
		{"held", held.Addr().String(), "FAIL"},
		{"free", "127.0.0.1:" + testenv.ClosedPort(t), "PASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.DefaultConfig()
			cfg.InstanceID = "i-0123456789abcdef0"
			cfg.AdminAddr = tc.addr
			c := &cli{stdout: io.Discard, stderr: io.Discard}
			var got *doctorCheck
			for _, ch := range c.doctor(t.Context(), cfg) {
				if ch.name == "admin port" {
					got = &ch
				}
			}
			switch {
			case got == nil:
				t.Fatal("no admin port check")
			case tc.want == "FAIL" && (got.err == nil || !strings.Contains(got.err.Error(), "admin_addr "+tc.addr)):
				t.Fatalf("admin port check %+v, want a failure naming admin_addr %s", got, tc.addr)
			case tc.want == "PASS" && got.err != nil:
				t.Fatalf("admin port check %+v, want a pass", got)
			}
		})
	}
}
