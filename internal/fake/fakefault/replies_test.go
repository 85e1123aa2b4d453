package fakefault

import (
	"bytes"
	"errors"
	"testing"
)

func TestRepliesTakeInOrder(t *testing.T) {
	var s Replies[string]
	s.SetReply("default")
	s.Queue("a", "b")
	for _, want := range []string{"a", "b"} {
		if got, ok := s.Take(); !ok || got != want {
			t.Fatalf("Take() = %q, %v; want %q, true", got, ok, want)
		}
	}
	if got, ok := s.Take(); ok {
		t.Fatalf("Take() on an empty queue = %q, true", got)
	}
	if s.Reply() != "default" {
		t.Fatalf("Reply() = %q", s.Reply())
	}
}

type failAfter struct{ n int }

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("closed")
	}
	f.n--
	return len(p), nil
}

func TestFill(t *testing.T) {
	var b bytes.Buffer
	if err := Fill(&b, 100<<10); err != nil || b.Len() != 100<<10 || bytes.Count(b.Bytes(), []byte("A")) != b.Len() {
		t.Fatalf("Fill wrote %d bytes, err %v", b.Len(), err)
	}
	w := &failAfter{n: 1}
	if err := Fill(w, 1<<30); err == nil {
		t.Fatal("Fill went on after a failed write")
	}
}
