package streamq

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Group is the consumer group every autodiag stream is read by: all agents
// of a fleet share it, each one a consumer named after its instance.
const Group = "autodiag"

// groupCreator is what CreateGroup uses of go-redis; *redis.Client,
// *redis.ClusterClient and *redis.Ring all have it.
type groupCreator interface {
	XGroupCreateMkStream(ctx context.Context, stream, group, start string) *redis.StatusCmd
}

// IsNoGroup says err is Redis's NOGROUP error (the stream or its consumer
// group does not exist), also when wrapped. Only an error Redis answered
// counts: the text of a client-side error that merely mentions NOGROUP
// (say, a wrapped message naming it) does not.
func IsNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// isBusyGroup says err is Redis's answer to creating a group that exists.
func isBusyGroup(err error) bool { return redis.HasErrorPrefix(err, "BUSYGROUP") }

// CreateGroup creates group on stream, and the stream itself when it does
// not exist (XGROUP CREATE … MKSTREAM). The group reads from the start of
// the stream, so entries written before it are not skipped. A group that
// exists already is not an error: every agent calls this on its first
// claim and again after IsNoGroup.
func CreateGroup(ctx context.Context, c groupCreator, stream, group string) error {
	if err := c.XGroupCreateMkStream(ctx, stream, group, "0").Err(); err != nil && !isBusyGroup(err) {
		return fmt.Errorf("streamq: create consumer group %s on %s: %w", group, stream, err)
	}
	return nil
}
