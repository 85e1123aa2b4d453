package open

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/instance"
)

// imdsServer answers instance-id to any GET; with v2 it also hands out
// session tokens, without it PUT /latest/api/token is 404, as on an
// instance metadata service that predates IMDSv2.
func imdsServer(t *testing.T, v2 bool, calls *atomic.Int64) *httptest.Server {
	t.Helper()
	const token = "tok"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			if !v2 {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
			_, _ = w.Write([]byte(token))
		case r.Method == http.MethodGet && r.URL.Path == "/latest/meta-data/instance-id":
			if v2 && r.Header.Get("X-Aws-Ec2-Metadata-Token") != token {
				http.Error(w, "no token", http.StatusUnauthorized)
				return
			}
			_, _ = w.Write([]byte("i-0123456789abcdef0"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestResolveInstanceID: instance metadata is asked only when AWS is
// configured and only with a session token (no IMDSv1 fallback); without
// an id the sqs source refuses to start and the signal source falls back
// to the hostname.
func TestResolveInstanceID(t *testing.T) {
	sqsSource := config.Config{}
	sqsSource.Lifecycle.Sources = []string{"signal", "sqs"}
	signalOnly := config.Config{}
	signalOnly.Lifecycle.Sources = []string{"signal"}
	launchHook := signalOnly
	launchHook.Lifecycle.LaunchHookName = "launch"
	tests := []struct {
		name     string
		v2, aws  bool
		cfg      config.Config
		want     string
		wantErr  bool
		wantCall bool
	}{
		{name: "IMDSv2", v2: true, aws: true, cfg: sqsSource, want: "i-0123456789abcdef0", wantCall: true},
		{name: "IMDSv1 only: no fallback", aws: true, cfg: sqsSource, wantErr: true, wantCall: true},
		{name: "IMDSv1 only, signal source", aws: true, cfg: signalOnly, want: "test-host", wantCall: true},
		{name: "IMDSv1 only, launch hook: no fallback", aws: true, cfg: launchHook, wantErr: true, wantCall: true},
		{name: "no AWS: IMDS not asked", v2: true, cfg: signalOnly, want: "test-host"},
		{name: "configured id", v2: true, aws: true, cfg: config.Config{InstanceID: "i-0fedcba9876543210"}, want: "i-0fedcba9876543210"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			srv := imdsServer(t, tc.v2, &calls)
			t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.URL)
			t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
			var awsCfg *aws.Config
			if tc.aws {
				c, err := awsconfig.LoadDefaultConfig(t.Context(), awsconfig.WithRegion("us-east-1"),
					awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("AKID", "secret", "")))
				if err != nil {
					t.Fatal(err)
				}
				awsCfg = &c
			}
			dir := t.TempDir()
			o := Options{Hostname: "test-host", CloudInitPath: filepath.Join(dir, "none"), DMIAssetTagPath: filepath.Join(dir, "none")}
			id, err := InstanceID(t.Context(), tc.cfg, awsCfg, o, orDiscard(nil))
			var ie *InstanceIDError
			if tc.wantErr != errors.As(err, &ie) || id != tc.want {
				t.Fatalf("InstanceID = %q, %v; want %q (error: %v)", id, err, tc.want, tc.wantErr)
			}
			if tc.wantErr && !errors.Is(err, instance.ErrNotFound) {
				t.Errorf("err = %v; want it to wrap instance.ErrNotFound", err)
			}
			if got := calls.Load() > 0; got != tc.wantCall {
				t.Errorf("instance metadata asked: %v; want %v", got, tc.wantCall)
			}
			if !tc.v2 && tc.wantCall {
				// Only the token request: never an unauthenticated GET.
				if n := calls.Load(); n != 1 {
					t.Errorf("%d requests to an IMDSv1-only service; want 1 (the refused token)", n)
				}
			}
		})
	}
}
