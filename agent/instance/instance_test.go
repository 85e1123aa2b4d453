package instance

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/autodiag/autodiag/internal/testenv"
)

// mockInstanceID is the instance-id amazon-ec2-metadata-mock serves.
const mockInstanceID = "i-1234567890abcdef0"

// strictIMDS is an IMDSv2-only client for url: no fallback to v1 requests.
func strictIMDS(url string) *imds.Client {
	return imds.New(imds.Options{Endpoint: url, EnableFallback: aws.FalseTernary,
		// Pointed at the loopback mock: on even where the shell sets
		// AWS_EC2_METADATA_DISABLED=true, as the repo's rules ask.
		ClientEnableState: imds.ClientEnabled})
}

// writeFile writes content to a new file under dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDiscoverFromMetadataMock(t *testing.T) {
	url, _ := testenv.StartMetadataMock(t, "--imdsv2")
	dir := t.TempDir()
	// Both fallbacks hold other valid ids: instance metadata must win.
	id, source, err := Discover(t.Context(), Options{
		IMDS:            strictIMDS(url),
		CloudInitPath:   writeFile(t, dir, "instance-id", "i-0aaaaaaaaaaaaaaaa\n"),
		DMIAssetTagPath: writeFile(t, dir, "board_asset_tag", "i-0bbbbbbbbbbbbbbbb\n"),
	})
	if err != nil || id != mockInstanceID || source != SourceIMDS {
		t.Fatalf("Discover = %q, %q, %v; want %q from %s", id, source, err, mockInstanceID, SourceIMDS)
	}
}

func TestDiscoverFallbacks(t *testing.T) {
	unreachable := strictIMDS("http://127.0.0.1:" + testenv.ClosedPort(t))
	const (
		cloudInitID = "i-0123456789abcdef0"
		dmiID       = "i-0fedcba9876543210"
	)
	tests := []struct {
		name            string
		imds            IMDSAPI
		cloudInit, dmi  *string // nil = no such file
		wantID, wantSrc string
		wantInErr       []string // substrings of the NotFoundError
	}{
		{name: "cloud-init after unreachable IMDS", imds: unreachable,
			cloudInit: ptr(cloudInitID + "\n"), dmi: ptr(dmiID),
			wantID: cloudInitID, wantSrc: SourceCloudInit},
		{name: "dmi after unreachable IMDS and no cloud-init", imds: unreachable,
			dmi: ptr(dmiID + "\n"), wantID: dmiID, wantSrc: SourceDMI},
		{name: "hostname in cloud-init skipped", imds: unreachable,
			cloudInit: ptr("ip-10-0-0-1.ec2.internal\n"), dmi: ptr(dmiID),
			wantID: dmiID, wantSrc: SourceDMI},
		{name: "old 8-digit id", cloudInit: ptr("i-0123abcd"), wantID: "i-0123abcd", wantSrc: SourceCloudInit},
		{name: "garbage from IMDS skipped", imds: answer("<html>proxy login</html>"),
			cloudInit: ptr(cloudInitID), wantID: cloudInitID, wantSrc: SourceCloudInit},
		{name: "nothing found", imds: unreachable,
			cloudInit: ptr("web-1\n"), dmi: ptr("Not Specified\n"),
			wantInErr: []string{`imds: get instance-id`, `cloud-init`, `"web-1" does not match`, `dmi`,
				`"Not Specified" does not match`, "instance_id", "AUTODIAG_INSTANCE_ID"}},
		{name: "no files, no client",
			wantInErr: []string{"no instance metadata client", "no such file", "instance_id", "AUTODIAG_INSTANCE_ID"}},
		{name: "wrong shapes rejected", imds: answer("I-0123456789ABCDEF0"),
			cloudInit: ptr("i-0123456789abcdef01"), dmi: ptr(""),
			wantInErr: []string{`"I-0123456789ABCDEF0" does not match`, `"i-0123456789abcdef01" does not match`, "dmi", "empty"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the unreachable cases each wait out the IMDS timeout
			dir := t.TempDir()
			o := Options{IMDS: tc.imds, CloudInitPath: filepath.Join(dir, "instance-id"),
				DMIAssetTagPath: filepath.Join(dir, "board_asset_tag")}
			if tc.cloudInit != nil {
				writeFile(t, dir, "instance-id", *tc.cloudInit)
			}
			if tc.dmi != nil {
				writeFile(t, dir, "board_asset_tag", *tc.dmi)
			}
			var logs testenv.LockedBuffer
			o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			id, source, err := Discover(t.Context(), o)
			if tc.wantInErr == nil {
				if err != nil || id != tc.wantID || source != tc.wantSrc {
					t.Fatalf("Discover = %q, %q, %v; want %q from %s", id, source, err, tc.wantID, tc.wantSrc)
				}
				return
			}
			var nf *NotFoundError
			if !errors.Is(err, ErrNotFound) || !errors.As(err, &nf) || id != "" || source != "" {
				t.Fatalf("Discover = %q, %q, %v; want a NotFoundError", id, source, err)
			}
			if len(nf.Skipped) != 3 {
				t.Errorf("skipped %d sources; want all 3: %v", len(nf.Skipped), err)
			}
			for _, s := range tc.wantInErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if got := strings.Count(logs.String(), "instance id source skipped"); got != 3 {
				t.Errorf("logged %d skipped sources; want 3:\n%s", got, logs.String())
			}
		})
	}
}

func TestDiscoverNotFoundKeepsCauses(t *testing.T) {
	dir := t.TempDir()
	_, _, err := Discover(t.Context(), Options{CloudInitPath: filepath.Join(dir, "a"), DMIAssetTagPath: filepath.Join(dir, "b")})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("err = %v; want it to wrap fs.ErrNotExist", err)
	}
	if strings.Count(err.Error(), filepath.Join(dir, "a")) != 1 {
		t.Fatalf("err = %q; want the path named once", err)
	}
}

// TestDiscoverIMDSTimeout checks that a metadata service that never answers
// holds Discover for exactly the timeout, then the files are read.
func TestDiscoverIMDSTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(strconv.Itoa(int(timeout.Milliseconds()))+"ms", func(t *testing.T) {
			dir := t.TempDir()
			o := Options{IMDS: hang{}, IMDSTimeout: timeout,
				CloudInitPath: writeFile(t, dir, "instance-id", "i-0123456789abcdef0")}
			want := timeout
			if want == 0 {
				want = DefaultIMDSTimeout
			}
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				id, source, err := Discover(t.Context(), o)
				if err != nil || source != SourceCloudInit || id != "i-0123456789abcdef0" {
					t.Fatalf("Discover = %q, %q, %v; want the cloud-init id", id, source, err)
				}
				if got := time.Since(start); got != want {
					t.Fatalf("instance metadata held Discover %s; want exactly %s", got, want)
				}
			})
		})
	}
}

func TestDiscoverCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	dir := t.TempDir()
	_, _, err := Discover(ctx, Options{IMDS: hang{}, CloudInitPath: writeFile(t, dir, "instance-id", "i-0123456789abcdef0")})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrNotFound) {
		t.Fatalf("err = %v; want context.Canceled, not a fallback", err)
	}
}

func ptr(s string) *string { return &s }

// answer is an IMDSAPI that answers every path with v.
type answer string

func (a answer) GetMetadata(context.Context, *imds.GetMetadataInput, ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	return &imds.GetMetadataOutput{Content: io.NopCloser(strings.NewReader(string(a)))}, nil
}

// hang is an IMDSAPI that never answers: it returns when ctx ends.
type hang struct{}

func (hang) GetMetadata(ctx context.Context, _ *imds.GetMetadataInput, _ ...func(*imds.Options)) (*imds.GetMetadataOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

var (
	_ IMDSAPI = (*imds.Client)(nil)
	_ IMDSAPI = answer("")
	_ IMDSAPI = hang{}
)
