package streamq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/internal/streamq"
	"github.com/autodiag/autodiag/internal/testenv"
)

func client(t *testing.T) (*redis.Client, string) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = rc.Close() })
	prefix := fmt.Sprintf("streamq-test:%s:", t.Name())
	t.Cleanup(func() {
		keys, _ := rc.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rc.Del(context.Background(), keys...)
		}
	})
	return rc, prefix
}

// IsNoGroup holds for what Redis answers about a missing group, wrapped or
// not, and for nothing else, however it is worded.
func TestIsNoGroup(t *testing.T) {
	rc, prefix := client(t)
	ctx := t.Context()
	stream := prefix + "missing"
	readErr := rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: streamq.Group, Consumer: "c",
		Streams: []string{stream, ">"}, Count: 1, Block: -1}).Err()
	_, _, claimErr := rc.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: stream, Group: streamq.Group,
		Consumer: "c", MinIdle: 0, Start: "0", Count: 1}).Result()
	rc.Set(ctx, prefix+"string", "x", 0)
	wrongType := rc.XLen(ctx, prefix+"string").Err()
	if readErr == nil || claimErr == nil || wrongType == nil {
		t.Fatalf("want Redis errors, got %v, %v, %v", readErr, claimErr, wrongType)
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"XREADGROUP on a missing group", readErr, true},
		{"XAUTOCLAIM on a missing group", claimErr, true},
		{"wrapped", fmt.Errorf("report: claim pending: %w", readErr), true},
		{"wrapped twice", fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", claimErr)), true},
		{"nil", nil, false},
		{"another Redis error", wrongType, false},
		{"a client error naming NOGROUP", errors.New("NOGROUP in a message that Redis did not send"), false},
		{"a wrapped client error naming NOGROUP", fmt.Errorf("claim: %w", errors.New("saw NOGROUP")), false},
		{"the context's error", context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := streamq.IsNoGroup(tc.err); got != tc.want {
				t.Errorf("IsNoGroup(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// CreateGroup makes the stream, takes an existing group as done, reads
// entries written before it, and reports what else Redis refuses.
func TestCreateGroup(t *testing.T) {
	rc, prefix := client(t)
	ctx := t.Context()
	stream := prefix + "jobs"
	if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"k", "before"}}).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := streamq.CreateGroup(ctx, rc, stream, streamq.Group); err != nil {
			t.Fatalf("CreateGroup #%d: %v, want nil (an existing group is fine)", i+1, err)
		}
	}
	res, err := rc.XReadGroup(ctx, &redis.XReadGroupArgs{Group: streamq.Group, Consumer: "c",
		Streams: []string{stream, ">"}, Count: 10, Block: -1}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 1 || res[0].Messages[0].Values["k"] != "before" {
		t.Fatalf("read after CreateGroup: %v %v, want the entry written before the group", res, err)
	}

	fresh := prefix + "fresh"
	if err := streamq.CreateGroup(ctx, rc, fresh, streamq.Group); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.Exists(ctx, fresh).Result(); err != nil || n != 1 {
		t.Errorf("stream %s exists = %d %v, want created with the group", fresh, n, err)
	}

	rc.Set(ctx, prefix+"string", "x", 0)
	err = streamq.CreateGroup(ctx, rc, prefix+"string", streamq.Group)
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) {
		t.Errorf("CreateGroup on a string key: %v, want the Redis error, wrapped", err)
	}
}
