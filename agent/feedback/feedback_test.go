package feedback

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/testenv"
)

func stores(t *testing.T) map[string]Store {
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "fbtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rc.Keys(ctx, prefix+"*").Result()
		for _, k := range keys {
			rc.Del(ctx, k)
		}
		_ = rc.Close()
	})
	return map[string]Store{"memory": NewMemory(), "redis": NewRedis(rc, prefix, time.Hour)}
}

// A verdict is kept once per person and task: a second one from the same
// person returns the first; another person's counts too.
func TestRecordOncePerPerson(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			at := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
			first := Verdict{TaskID: "t-1", Verdict: Good, By: "ana", At: at, Diagnostic: "uptime", Confidence: "likely"}
			if _, err := s.Record(ctx, first); err != nil {
				t.Fatal(err)
			}
			again := first
			again.Verdict, again.Note = Wrong, "changed my mind"
			got, err := s.Record(ctx, again)
			if !errors.Is(err, ErrAlreadyRecorded) || got.Verdict != Good || got.By != "ana" {
				t.Fatalf("second verdict: %+v %v, want the first and ErrAlreadyRecorded", got, err)
			}
			other := first
			other.By, other.Verdict = "bo", Wrong
			if _, err := s.Record(ctx, other); err != nil {
				t.Fatal(err)
			}
			log, err := s.Log(ctx)
			if err != nil || len(log) != 2 || log[0].By != "ana" || log[1].By != "bo" {
				t.Fatalf("log %+v %v, want ana's and bo's verdicts in order", log, err)
			}
		})
	}
}

func TestTable(t *testing.T) {
	vs := []Verdict{
		{Diagnostic: "uptime", Confidence: "likely", Verdict: Good},
		{Diagnostic: "uptime", Confidence: "likely", Verdict: Good},
		{Diagnostic: "uptime", Confidence: "likely", Verdict: Wrong},
		{Diagnostic: "disk-usage", Confidence: "confirmed", Verdict: Good},
		{Diagnostic: "uptime", Verdict: Wrong},
	}
	rs := []Resolution{
		{Diagnostic: "uptime", Confidence: "likely", Within1h: true},
		{Diagnostic: "uptime", Confidence: "likely", Within1h: false},
		{Diagnostic: "memory", Confidence: "", Within1h: true},
	}
	want := []Row{
		{Diagnostic: "disk-usage", Confidence: "confirmed", Good: 1, Precision: 1},
		{Diagnostic: "memory", Confidence: "none", Resolved: 1, Within1h: 1, WithinShare: 1},
		{Diagnostic: "uptime", Confidence: "likely", Good: 2, Wrong: 1, Precision: 2.0 / 3, Resolved: 2, Within1h: 1, WithinShare: 0.5},
		{Diagnostic: "uptime", Confidence: "none", Wrong: 1, Precision: 0},
	}
	if got := Table(vs, rs); !slices.Equal(got, want) {
		t.Fatalf("table %+v, want %+v", got, want)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    Verdict
		ok   bool
	}{
		{"good", Verdict{Verdict: Good, By: "ana"}, true},
		{"unknown verdict", Verdict{Verdict: "meh", By: "ana"}, false},
		{"nobody", Verdict{Verdict: Good, By: "  "}, false},
		{"control in by", Verdict{Verdict: Good, By: "ana\n"}, false},
		{"long note", Verdict{Verdict: Wrong, By: "ana", Note: string(make([]byte, MaxNote+1))}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.v.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok %v", err, tc.ok)
			}
		})
	}
}
