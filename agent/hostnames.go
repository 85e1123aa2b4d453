package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/agent/task"
)

// hostNamesTimeout bounds each instance metadata read of the agent's
// names at start.
const hostNamesTimeout = 2 * time.Second

// learnHostNames are the names of the machine the agent runs on, as a
// task's host may name it: the EC2 private DNS name and private IPv4
// address (instance metadata, when AWS is configured), the hostname and
// the instance id, in that order (the first is the canonical one). What
// cannot be learnt is left out, with a warning for metadata.
func learnHostNames(ctx context.Context, awsCfg *aws.Config, instanceID, hostname string, log *slog.Logger) []string {
	var names []string
	if awsCfg != nil {
		c := imds.NewFromConfig(*awsCfg, func(o *imds.Options) { o.EnableFallback = aws.FalseTernary })
		for _, path := range []string{"local-hostname", "local-ipv4"} {
			v, err := readMetadata(ctx, c, path)
			if err != nil {
				log.Warn("could not learn a host name of this instance from instance metadata; tasks naming it are not routed here",
					"path", path, "err", err)
				continue
			}
			// local-hostname may list several names, space-separated.
			names = append(names, strings.Fields(v)...)
		}
	}
	if hostname == "" {
		hostname, _ = os.Hostname()
	}
	return append(names, hostname, instanceID)
}

func readMetadata(ctx context.Context, c *imds.Client, path string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, hostNamesTimeout)
	defer cancel()
	out, err := c.GetMetadata(cctx, &imds.GetMetadataInput{Path: path})
	if err != nil {
		return "", err
	}
	defer func() { _ = out.Content.Close() }()
	b, err := io.ReadAll(io.LimitReader(out.Content, 1024))
	return strings.TrimSpace(string(b)), err
}

// ownHostNames are names normalised as task hosts are, without repeats,
// in order; a name no task could name is left out.
func ownHostNames(names ...string) []string {
	var out []string
	for _, n := range names {
		h, err := task.NormalizeHost(n)
		if err != nil || slices.Contains(out, h) {
			continue
		}
		out = append(out, h)
	}
	return out
}

// firstOwn is name normalised as a host name is, "" when no task could
// name it.
func firstOwn(name string) string {
	if own := ownHostNames(name); len(own) > 0 {
		return own[0]
	}
	return ""
}

// ownedAddr reports whether an IP literal is one of this agent's names or,
// with a shared store, a live agent's (one lookup bounded by
// redis.timeout; an unanswered one is not owned).
func ownedAddr(own []string, store any, timeout time.Duration) func(string) bool {
	names, _ := store.(state.HostNames)
	return func(h string) bool {
		if slices.Contains(own, h) {
			return true
		}
		if names == nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, ok, err := names.HostOwner(ctx, h)
		return ok && err == nil
	}
}
