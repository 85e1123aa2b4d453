package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/autodiag/autodiag/agent/config"
)

// TestDoctorS3: doctor's s3 line asks HeadBucket of results.s3.bucket at
// AWS_ENDPOINT_URL_S3, signed with the environment's credentials: PASS
// for a bucket gofakes3 holds, FAIL naming a bucket it does not.
func TestDoctorS3(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "us-east-1")
	backend := s3mem.New()
	if err := backend.CreateBucket("diag-out"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	fake := gofakes3.New(backend).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" signed="+
			map[bool]string{true: "yes", false: "no"}[strings.Contains(r.Header.Get("Authorization"), "Credential=AKIDTEST/")])
		mu.Unlock()
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.URL)

	for _, tc := range []struct {
		bucket, want string
	}{
		{"diag-out", "PASS"},
		{"absent-bucket", "FAIL"},
	} {
		cfg := config.DefaultConfig()
		cfg.InstanceID = "i-0123456789abcdef0"
		cfg.Results.S3.Bucket, cfg.Results.S3.PathStyle = tc.bucket, true
		c := &cli{}
		var got string
		var detail string
		for _, ch := range c.doctor(t.Context(), cfg) {
			if ch.name != "s3" {
				continue
			}
			switch {
			case ch.skip != "":
				got = "SKIP"
			case ch.err != nil:
				got, detail = "FAIL", ch.err.Error()
			default:
				got = "PASS"
			}
		}
		if got != tc.want {
			t.Errorf("bucket %s: s3 is %s (%s), want %s", tc.bucket, got, detail, tc.want)
		}
		if tc.want == "FAIL" && !strings.Contains(detail, tc.bucket) {
			t.Errorf("bucket %s: the failure %q does not name the bucket", tc.bucket, detail)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"HEAD /diag-out signed=yes", "HEAD /absent-bucket signed=yes"}
	if strings.Join(seen, "; ") != strings.Join(want, "; ") {
		t.Errorf("requests %q, want %q", seen, want)
	}
}
