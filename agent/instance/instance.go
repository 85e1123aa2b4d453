package instance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
)

// DefaultIMDSTimeout bounds the instance metadata lookup, token included.
// IMDS answers in milliseconds on EC2; off EC2 (or with IMDS disabled or
// out of hops) the call would otherwise wait out the SDK's retries.
const DefaultIMDSTimeout = 2 * time.Second

// Where the fallbacks are read on a Linux EC2 instance.
const (
	DefaultCloudInitPath   = "/var/lib/cloud/data/instance-id"
	DefaultDMIAssetTagPath = "/sys/devices/virtual/dmi/id/board_asset_tag"
)

// Source names, as Discover returns them and logs them.
const (
	SourceIMDS      = "imds"
	SourceCloudInit = "cloud-init"
	SourceDMI       = "dmi"
)

// maxFileBytes caps what is read from a fallback file: an instance id is 19
// bytes, and a misconfigured path must not read a large file into memory.
const maxFileBytes = 256

// Pattern is what an EC2 instance id looks like (8 hex digits for the old
// format, 17 for the current one).
var Pattern = regexp.MustCompile(`^i-[0-9a-f]{8,17}$`)

// ErrNotFound is returned (wrapped in a *NotFoundError) when no source gave
// a valid instance id.
var ErrNotFound = errors.New("instance: no EC2 instance id found")

// IMDSAPI is the instance metadata call Discover makes, in the SDK's shape.
type IMDSAPI interface {
	GetMetadata(ctx context.Context, params *imds.GetMetadataInput, optFns ...func(*imds.Options)) (*imds.GetMetadataOutput, error)
}

// Options say where Discover looks. The zero value looks at the default
// files only (no instance metadata client).
type Options struct {
	// IMDS is asked for instance-id first; nil skips instance metadata.
	IMDS IMDSAPI
	// IMDSTimeout bounds the instance metadata call; 0 = DefaultIMDSTimeout.
	IMDSTimeout time.Duration
	// CloudInitPath is cloud-init's instance-id file; "" = DefaultCloudInitPath.
	CloudInitPath string
	// DMIAssetTagPath is the DMI board asset tag; "" = DefaultDMIAssetTagPath.
	DMIAssetTagPath string
	// Logger receives one line per skipped source; nil discards.
	Logger *slog.Logger
}

// Skip is one source that gave no valid instance id, and why.
type Skip struct {
	Source string // SourceIMDS, SourceCloudInit or SourceDMI
	Where  string // the file path; "" for instance metadata
	Err    error
}

func (s Skip) String() string {
	if s.Where == "" {
		return s.Source + ": " + s.Err.Error()
	}
	return s.Source + " " + s.Where + ": " + s.Err.Error()
}

// NotFoundError lists every source Discover tried. It matches ErrNotFound
// with errors.Is, and each source's cause through Unwrap.
type NotFoundError struct {
	Skipped []Skip
}

func (e *NotFoundError) Error() string {
	parts := make([]string, len(e.Skipped))
	for i, s := range e.Skipped {
		parts[i] = s.String()
	}
	return fmt.Sprintf("%s (%s); set instance_id in the config file or AUTODIAG_INSTANCE_ID in the environment",
		ErrNotFound, strings.Join(parts, "; "))
}

// Unwrap returns ErrNotFound and each source's cause.
func (e *NotFoundError) Unwrap() []error {
	errs := []error{ErrNotFound}
	for _, s := range e.Skipped {
		errs = append(errs, s.Err)
	}
	return errs
}

// InvalidError is a candidate that does not look like an instance id. Its
// value is quoted (capped) so a hostname or garbage is recognisable in the
// message.
type InvalidError struct {
	Value string
}

func (e *InvalidError) Error() string {
	v := e.Value
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	if v == "" {
		return "empty"
	}
	return fmt.Sprintf("%q does not match %s", v, Pattern)
}

// Discover returns this instance's EC2 id and the source that gave it:
// instance metadata, then cloud-init's file, then the DMI asset tag. A
// cancelled ctx ends it with ctx's error; otherwise a failure is a
// *NotFoundError naming every source tried.
func Discover(ctx context.Context, o Options) (id, source string, err error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var skipped []Skip
	skip := func(s Skip) {
		skipped = append(skipped, s)
		if s.Where == "" {
			log.Info("instance id source skipped", "source", s.Source, "err", s.Err)
			return
		}
		log.Info("instance id source skipped", "source", s.Source, "path", s.Where, "err", s.Err)
	}

	if o.IMDS == nil {
		skip(Skip{Source: SourceIMDS, Err: errors.New("no instance metadata client")})
	} else {
		v, err := fromIMDS(ctx, o.IMDS, cmp(o.IMDSTimeout, DefaultIMDSTimeout))
		if err == nil {
			err = check(v)
		}
		if err == nil {
			return v, SourceIMDS, nil
		}
		if ctx.Err() != nil {
			return "", "", fmt.Errorf("instance: %w", context.Cause(ctx))
		}
		skip(Skip{Source: SourceIMDS, Err: err})
	}

	for _, f := range []struct{ source, path string }{
		{SourceCloudInit, cmp(o.CloudInitPath, DefaultCloudInitPath)},
		{SourceDMI, cmp(o.DMIAssetTagPath, DefaultDMIAssetTagPath)},
	} {
		v, err := readSmall(f.path)
		if err == nil {
			err = check(v)
		}
		if err == nil {
			return v, f.source, nil
		}
		skip(Skip{Source: f.source, Where: f.path, Err: err})
	}
	return "", "", &NotFoundError{Skipped: skipped}
}

// cmp returns v, or def when v is the zero value.
func cmp[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func check(v string) error {
	if !Pattern.MatchString(v) {
		return &InvalidError{Value: v}
	}
	return nil
}

// fromIMDS reads instance-id on a context bounded by timeout, created here
// so the bound covers only this call.
func fromIMDS(ctx context.Context, c IMDSAPI, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := c.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
	if err != nil {
		return "", fmt.Errorf("get instance-id (timeout %gs): %w", timeout.Seconds(), err)
	}
	defer out.Content.Close()
	b, err := io.ReadAll(io.LimitReader(out.Content, maxFileBytes))
	if err != nil {
		return "", fmt.Errorf("read instance-id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func readSmall(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		// The Skip names the path; keep the cause (fs.ErrNotExist, …).
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return "", fmt.Errorf("%s: %w", pe.Op, pe.Err)
		}
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
