package fakefault

import (
	"io"
	"strings"
	"sync"
)

// Replies is what a model fake answers: a default reply text, replies
// queued for the next requests in order, and the size of a hostile
// answer. The Bedrock and OpenAI-compatible fakes embed it, so a test
// scripts both the same way; R is the fake's own reply type.
type Replies[R any] struct {
	mu      sync.Mutex // guards every field
	reply   string
	replies []R
	huge    int64
}

// SetReply sets the answer text given when no reply is queued.
func (s *Replies[R]) SetReply(text string) { s.mu.Lock(); s.reply = text; s.mu.Unlock() }

// Queue adds answers given, in order, to the next requests that take one;
// when none is queued the answer is the reply of SetReply.
func (s *Replies[R]) Queue(rs ...R) { s.mu.Lock(); s.replies = append(s.replies, rs...); s.mu.Unlock() }

// SetHugeBytes sets the size of the text a hostile answer streams.
func (s *Replies[R]) SetHugeBytes(n int64) { s.mu.Lock(); s.huge = n; s.mu.Unlock() }

// Reply is the answer text of SetReply.
func (s *Replies[R]) Reply() string { s.mu.Lock(); defer s.mu.Unlock(); return s.reply }

// HugeBytes is the size of SetHugeBytes.
func (s *Replies[R]) HugeBytes() int64 { s.mu.Lock(); defer s.mu.Unlock(); return s.huge }

// Take removes and returns the first queued reply; ok is false when none
// is queued.
func (s *Replies[R]) Take() (r R, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.replies) == 0 {
		return r, false
	}
	r = s.replies[0]
	s.replies = s.replies[1:]
	return r, true
}

// Fill writes n bytes of 'A' to w without holding them, in 64 KiB writes,
// and stops early when a write fails (the client stopped reading).
func Fill(w io.Writer, n int64) error {
	chunk := []byte(strings.Repeat("A", 64<<10))
	for n > 0 {
		c := chunk[:min(int64(len(chunk)), n)]
		if _, err := w.Write(c); err != nil {
			return err
		}
		n -= int64(len(c))
	}
	return nil
}
