package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// HandedNotice is one lifecycle notice another agent handed to an
// instance (GiveNotice), as TakeNotices returns it.
type HandedNotice struct {
	ID   string // stream entry id, TakeNotices' after
	Body string
}

// noticesMaxLen bounds an instance's handed notices: one action is handed
// once per delivery of its message, so a few suffice.
const noticesMaxLen = 16

// Live reports whether instanceID's agent keeps its record fresh: its
// heartbeat expiry in the instance index is ahead of now.
func (r *RedisHandoff) Live(ctx context.Context, instanceID string) (bool, error) {
	return wait(ctx, r, "live", instanceID, func(ctx context.Context) (bool, error) { return r.live(ctx, instanceID) })
}

// live is Live on the caller's goroutine, for a call already inside wait.
func (r *RedisHandoff) live(ctx context.Context, instanceID string) (bool, error) {
	score, err := r.c.ZScore(ctx, r.k.instances(instanceID), instanceID).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("state: live %s: %w", instanceID, err)
	}
	return score > float64(r.o.Clock.Now().UnixMilli()), nil
}

// GiveNotice appends notice to the notices handed to instanceID (stream
// P handoff:INST, at most noticesMaxLen, TTL ttl from this write) when that
// instance's agent is live, and reports whether it did: false, and
// nothing written, when that agent is not live.
func (r *RedisHandoff) GiveNotice(ctx context.Context, instanceID, notice string, ttl time.Duration) (bool, error) {
	return wait(ctx, r, "give notice to", instanceID, func(ctx context.Context) (bool, error) {
		live, err := r.live(ctx, instanceID)
		if err != nil || !live {
			return false, err
		}
		key := r.k.handoff(instanceID)
		_, err = r.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: noticesMaxLen, Values: []any{"notice", notice}})
			p.PExpire(ctx, key, ttl)
			return nil
		})
		if err != nil {
			return false, fmt.Errorf("state: give notice to %s: %w", instanceID, err)
		}
		return true, nil
	})
}

// TakeNotices returns the notices handed to instanceID after the entry
// after ("" = from the first), oldest first, waiting up to block for one
// (XREAD BLOCK). They stay stored: ForgetNotices or their TTL removes them.
// A wait is cut short when ctx is cancelled: the read runs on a connection
// of its own, which CLIENT UNBLOCK frees (the client itself would wait for
// the block to end).
func (r *RedisHandoff) TakeNotices(ctx context.Context, instanceID, after string, block time.Duration) ([]HandedNotice, error) {
	out, err := r.takeStream(ctx, &r.hand, r.k.handoff(instanceID), "notice", after, noticesMaxLen, block)
	if err != nil {
		return nil, fmt.Errorf("state: take notices of %s: %w", instanceID, err)
	}
	return out, nil
}

// takeStream reads the entries of the stream key after the entry after
// ("" = from the first), at most count, waiting up to block for one on
// the connection conn keeps; field is the entry's value. A wait cut short
// by ctx returns nothing and no error.
func (r *RedisHandoff) takeStream(ctx context.Context, conn *handoffConn, key, field, after string, count int64, block time.Duration) ([]HandedNotice, error) {
	if after == "" {
		after = "0"
	}
	if block <= 0 {
		block = -1 // XREAD without BLOCK: BLOCK 0 would wait for ever
	}
	args := &redis.XReadArgs{Streams: []string{key, after}, Count: count, Block: block}
	var streams []redis.XStream
	var err error
	if node := r.nodeFor(ctx, key); node != nil && block > 0 {
		streams, err = conn.read(ctx, node, args)
	} else {
		streams, err = r.c.XRead(ctx, args).Result()
	}
	if errors.Is(err, redis.Nil) || (err != nil && ctx.Err() != nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []HandedNotice
	for _, s := range streams {
		for _, m := range s.Messages {
			body, _ := m.Values[field].(string)
			out = append(out, HandedNotice{ID: m.ID, Body: body})
		}
	}
	return out, nil
}

// nodeFor returns the client of the server holding key, or nil when the
// client cannot say (a Ring).
func (r *RedisHandoff) nodeFor(ctx context.Context, key string) *redis.Client {
	switch c := r.c.(type) {
	case *redis.Client:
		return c
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil
		}
		return node
	}
	return nil
}

// unblockRetry spaces CLIENT UNBLOCK attempts sent before the read has
// begun to block on the server.
const unblockRetry = 20 * time.Millisecond

// handoffConn is the connection the blocking reads of TakeNotices run
// on, kept with its CLIENT ID from one read to the next, so that an idle
// agent's wait costs Redis one command per block. A read that finds it
// in use (reads at once, for several instances) runs on a connection of
// its own.
type handoffConn struct {
	mu   sync.Mutex
	busy bool
	node *redis.Client
	conn *redis.Conn
	id   int64
}

// get returns a connection to node and its id, and put to give it back:
// kept for the next read when healthy, closed otherwise.
func (h *handoffConn) get(ctx context.Context, node *redis.Client) (*redis.Conn, int64, func(healthy bool), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.busy && h.conn != nil && h.node == node {
		h.busy = true
		return h.conn, h.id, h.put, nil
	}
	conn := node.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		_ = conn.Close()
		return nil, 0, nil, err
	}
	if h.busy {
		return conn, id, func(bool) { _ = conn.Close() }, nil
	}
	if h.conn != nil {
		_ = h.conn.Close() // another node (a Cluster's slots moved)
	}
	h.busy, h.node, h.conn, h.id = true, node, conn, id
	return conn, id, h.put, nil
}

func (h *handoffConn) put(healthy bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.busy = false
	if !healthy && h.conn != nil {
		_ = h.conn.Close()
		h.conn, h.node = nil, nil
	}
}

// close drops the kept connection.
func (h *handoffConn) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn != nil && !h.busy {
		_ = h.conn.Close()
		h.conn, h.node = nil, nil
	}
}

// read runs a blocking XREAD on the kept connection (or one of its own)
// and, when ctx is cancelled first, frees it with CLIENT UNBLOCK from
// another connection until the read returns.
func (h *handoffConn) read(ctx context.Context, node *redis.Client, args *redis.XReadArgs) (streams []redis.XStream, err error) {
	conn, id, put, err := h.get(ctx, node)
	if err != nil {
		return nil, err
	}
	defer func() { put(err == nil || errors.Is(err, redis.Nil)) }()
	done := make(chan struct{})
	unblocked := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(unblocked)
		deadline := time.After(args.Block + time.Second)
		for {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			n, _ := node.ClientUnblock(uctx, id).Result()
			cancel()
			if n == 1 {
				return
			}
			select { // not blocking yet, or already answered
			case <-done:
				return
			case <-deadline:
				return
			case <-time.After(unblockRetry):
			}
		}
	})
	streams, err = conn.XRead(ctx, args).Result()
	close(done)
	if !stop() {
		<-unblocked
	}
	return streams, err
}

// ForgetNotices drops the notices handed to instanceID.
func (r *RedisHandoff) ForgetNotices(ctx context.Context, instanceID string) error {
	return wait0(ctx, r, "forget notices of", instanceID, func(ctx context.Context) error {
		if err := r.c.Del(ctx, r.k.handoff(instanceID)).Err(); err != nil {
			return fmt.Errorf("state: forget notices of %s: %w", instanceID, err)
		}
		return nil
	})
}
