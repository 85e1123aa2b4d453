package sqsfake_test

import (
	"testing"
	"time"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

func TestFakeClock(t *testing.T) {
	c := sqsfake.NewFakeClock(epoch)
	t1 := c.NewTimer(10 * time.Second)
	t2 := c.NewTimer(5 * time.Second)
	t3 := c.NewTimer(7 * time.Second)
	if c.Waiters() != 3 {
		t.Fatalf("waiters %d", c.Waiters())
	}
	fired := func(tm sqsfake.Timer) bool {
		select {
		case <-tm.C():
			return true
		default:
			return false
		}
	}
	if !t3.Stop() || t3.Stop() {
		t.Fatal("Stop of a pending timer must report true once")
	}
	c.Advance(5 * time.Second)
	if !fired(t2) || fired(t1) || fired(t3) {
		t.Fatal("after 5 s only the 5 s timer fires")
	}
	if t2.Stop() {
		t.Fatal("Stop of a fired timer reports true")
	}
	c.Set(epoch.Add(time.Second)) // never backwards
	if !c.Now().Equal(epoch.Add(5 * time.Second)) {
		t.Fatalf("clock went backwards: %v", c.Now())
	}
	c.Set(epoch.Add(10 * time.Second))
	if !fired(t1) || c.Waiters() != 0 {
		t.Fatal("10 s timer did not fire")
	}
	if !fired(c.NewTimer(0)) {
		t.Fatal("a zero timer fires at once")
	}
}

func TestCallLogLimit(t *testing.T) {
	srv := sqsfake.New(sqsfake.WithCallLogLimit(3))
	for range 10 {
		rawCall(srv, "ListQueues", `{}`)
	}
	calls := srv.Calls()
	if len(calls) != 3 || calls[0].Seq != 8 || calls[2].Seq != 10 {
		t.Fatalf("calls %+v", calls)
	}
	if srv.Counters()["ListQueues"] != 10 {
		t.Fatalf("counters %v", srv.Counters())
	}
	srv.ResetLog()
	if len(srv.Calls()) != 0 || len(srv.Counters()) != 0 {
		t.Fatal("ResetLog kept entries")
	}
}
