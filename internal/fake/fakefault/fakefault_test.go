package fakefault

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestPlanHandsOutScriptThenStandingFault(t *testing.T) {
	var p Plan[int, string]
	p.Script(1, 2)
	p.Always(3)
	var got []int
	for _, req := range []string{"a", "b", "c", "d"} {
		got = append(got, p.Next(req))
	}
	if want := []int{1, 2, 3, 3}; !slices.Equal(got, want) {
		t.Errorf("faults = %v, want %v", got, want)
	}
	if reqs, want := p.Requests(), []string{"a", "b", "c", "d"}; !slices.Equal(reqs, want) {
		t.Errorf("requests = %v, want %v", reqs, want)
	}
}

func TestPlanWaitEndsOnCloseAndContext(t *testing.T) {
	var p Plan[int, string]
	if !p.Wait(t.Context(), 0) {
		t.Error("Wait(0) = false, want true")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if p.Wait(ctx, time.Hour) {
		t.Error("Wait with an ended context = true, want false")
	}
	p.Close()
	p.Close() // a second Close is harmless
	if p.Wait(t.Context(), time.Hour) {
		t.Error("Wait after Close = true, want false")
	}
}
