package agent

import (
	"context"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/lifecycle"
)

// noticeHandoff carries lifecycle notices between the agents sharing a
// notification queue through the Redis state store, for lifecycle's sqs
// source: a notice reaches its instance's agent in one receive.
type noticeHandoff struct{ s *state.RedisHandoff }

var _ lifecycle.Handoff = noticeHandoff{}

func (h noticeHandoff) Give(ctx context.Context, instanceID, notice string, ttl time.Duration) (bool, error) {
	return h.s.GiveNotice(ctx, instanceID, notice, ttl)
}

func (h noticeHandoff) Take(ctx context.Context, instanceID, after string, block time.Duration) ([]lifecycle.HandedNotice, error) {
	ns, err := h.s.TakeNotices(ctx, instanceID, after, block)
	out := make([]lifecycle.HandedNotice, len(ns))
	for i, n := range ns {
		out[i] = lifecycle.HandedNotice{ID: n.ID, Body: n.Body}
	}
	return out, err
}

func (h noticeHandoff) Forget(ctx context.Context, instanceID string) error {
	return h.s.ForgetNotices(ctx, instanceID)
}
