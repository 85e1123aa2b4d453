package detached

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCallOutlivesItsParent: the call runs although parent has ended,
// sees parent's values and a deadline of its own, and its error returns.
func TestCallOutlivesItsParent(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	cancel()
	want := errors.New("done")
	err := Call(parent, time.Minute, func(ctx context.Context) error {
		if ctx.Err() != nil {
			t.Errorf("ctx ended: %v", ctx.Err())
		}
		if ctx.Value(key{}) != "v" {
			t.Error("parent's value lost")
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Error("no deadline")
		}
		return want
	})
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
}
