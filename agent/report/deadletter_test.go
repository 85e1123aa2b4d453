package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/agent/internal/streamq"
	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/testenv"
)

// writerFunc is a Writer of one function.
type writerFunc func(ctx context.Context, ev Evidence) Result

func (f writerFunc) Generate(ctx context.Context, ev Evidence) Result { return f(ctx, ev) }

// countingWriter counts its calls and answers with do.
type countingWriter struct {
	mu    sync.Mutex
	calls int
	do    func() Result
}

func (w *countingWriter) Generate(context.Context, Evidence) Result {
	w.mu.Lock()
	w.calls++
	w.mu.Unlock()
	return w.do()
}

func (w *countingWriter) n() int { w.mu.Lock(); defer w.mu.Unlock(); return w.calls }

// logBuf is a logger writing into a buffer, for assertions on its lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func newDeadReporter(t *testing.T, q Queue, w Writer, sink Sink, lb *logBuf) (*Reporter, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := cannedOpenAI(cannedAnswer{status: 500})
	r, err := New(Options{Config: testConfig(), Provider: p, Queue: q, Sink: sink, Writer: w, Consumer: "i-test",
		Registerer: reg, Logger: slog.New(slog.NewJSONHandler(lb, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return r, reg
}

func deadCount(r *Reporter, reason string) float64 {
	return testutil.ToFloat64(r.m.dead.WithLabelValues(ProviderOpenAI, reason))
}

// redisQueue is a RedisQueue on the test server under a prefix of its own.
func redisQueue(t *testing.T, lease time.Duration) (*RedisQueue, *redis.Client) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	prefix := fmt.Sprintf("test:%s:%d:", t.Name(), time.Now().UnixNano())
	return NewRedisQueue(c, prefix, lease), c
}

// A report job whose writing panics (a hostile model answer reaching a
// counter, say) ends failed with the panic as its reason, leaves the
// queue, and is counted: the agent stays up, and no agent takes the job
// back after its lease to panic again.
func TestReporterDeadLettersAPanickingJob(t *testing.T) {
	queues := map[string]func(t *testing.T) Queue{
		"memory": func(*testing.T) Queue { return NewMemoryQueue(time.Millisecond, nil) },
		"redis":  func(t *testing.T) Queue { q, _ := redisQueue(t, time.Millisecond); return q },
	}
	for name, mk := range queues {
		t.Run(name, func(t *testing.T) {
			q := mk(t)
			w := &countingWriter{do: func() Result { panic("counter cannot decrease in value") }}
			sink, lb := newSink(), &logBuf{}
			r, _ := newDeadReporter(t, q, w, sink, lb)
			ctx := context.Background()
			if err := q.Enqueue(ctx, job("t1")); err != nil {
				t.Fatal(err)
			}
			c, ok, err := q.Claim(ctx, "i-test")
			if !ok || err != nil {
				t.Fatal(ok, err)
			}
			r.handle(c)
			res := sink.next(t, time.Second)
			if res.Status != StatusFailed || !strings.HasPrefix(res.Reason, DeadPanic+": ") ||
				!strings.Contains(res.Reason, "counter cannot decrease") {
				t.Fatalf("result %s %q, want failed with the panic", res.Status, res.Reason)
			}
			if n, _ := q.Len(ctx); n != 0 {
				t.Fatalf("the job is still queued (%d): another agent would take it and panic again", n)
			}
			// Past the lease, nobody takes it back.
			if _, ok, err := q.Claim(ctx, "i-other"); ok || err != nil {
				t.Fatalf("the dead job was claimed again: ok %v err %v", ok, err)
			}
			if got := deadCount(r, DeadPanic); got != 1 {
				t.Fatalf("dead-lettered{panic} = %g, want 1", got)
			}
			if !strings.Contains(lb.String(), `"msg":"report: dead-lettered"`) || strings.Contains(lb.String(), "report: written") {
				t.Fatalf("log:\n%s", lb.String())
			}
			if w.n() != 1 {
				t.Fatalf("written %d times", w.n())
			}
		})
	}
}

// A job claimed MaxJobAttempts times without finishing (each agent died
// writing it) is not written again on the next claim: it ends failed,
// max_attempts, and leaves the queue.
func TestReporterDeadLettersAfterMaxAttempts(t *testing.T) {
	ctx := context.Background()
	tests := map[string]func(t *testing.T) (Queue, func(c Claimed)){
		"memory": func(*testing.T) (Queue, func(Claimed)) {
			clk := clock.NewManual(time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC))
			return NewMemoryQueue(time.Minute, clk), func(Claimed) { clk.Add(2 * time.Minute) }
		},
		"redis": func(t *testing.T) (Queue, func(Claimed)) {
			q, c := redisQueue(t, time.Minute)
			// The holder died: its claim looks idle for two leases.
			return q, func(cl Claimed) {
				if err := c.Do(ctx, "XCLAIM", q.q.Stream(), streamq.Group, "dies", 0, cl.ref,
					"IDLE", (2 * time.Minute).Milliseconds(), "JUSTID").Err(); err != nil {
					t.Fatal(err)
				}
			}
		},
	}
	for name, mk := range tests {
		t.Run(name, func(t *testing.T) {
			q, die := mk(t)
			w := &countingWriter{do: func() Result { return Result{Status: StatusOK, Markdown: "ok"} }}
			sink := newSink()
			r, _ := newDeadReporter(t, q, w, sink, &logBuf{})
			if err := q.Enqueue(ctx, job("t1")); err != nil {
				t.Fatal(err)
			}
			var c Claimed
			for i := 1; i <= MaxJobAttempts+1; i++ {
				var ok bool
				var err error
				c, ok, err = q.Claim(ctx, fmt.Sprint("agent-", i))
				if !ok || err != nil || c.Attempt != i {
					t.Fatalf("claim %d: attempt %d ok %v err %v", i, c.Attempt, ok, err)
				}
				if i <= MaxJobAttempts {
					die(c)
				}
			}
			r.handle(c) //nolint:contextcheck // handle runs on the reporter's own work context, as a worker does
			res := sink.next(t, time.Second)
			if res.Status != StatusFailed || !strings.HasPrefix(res.Reason, DeadMaxAttempts+": ") {
				t.Fatalf("result %s %q, want failed, %s", res.Status, res.Reason, DeadMaxAttempts)
			}
			if w.n() != 0 {
				t.Fatal("the job was written again past its attempts")
			}
			if n, _ := q.Len(ctx); n != 0 {
				t.Fatalf("the job is still queued (%d)", n)
			}
			if got := deadCount(r, DeadMaxAttempts); got != 1 {
				t.Fatalf("dead-lettered{max_attempts} = %g, want 1", got)
			}
		})
	}
}

// jsonSink stores each result as the task store does: as JSON, which has
// no NaN; fail makes every store fail.
type jsonSink struct {
	mu     sync.Mutex
	stored [][]byte
	fail   error
}

func (s *jsonSink) Report(_ context.Context, j Job, r Result) error {
	if s.fail != nil {
		return s.fail
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("report of %s: %w", j.ID, err)
	}
	s.mu.Lock()
	s.stored = append(s.stored, b)
	s.mu.Unlock()
	return nil
}

// A report is logged "written" only when its result was stored: a result
// holding a number JSON cannot hold (a NaN cost from a NaN price) is made
// finite and stored; a store that fails is logged and counted as
// dead-lettered, not_stored, never as written.
func TestReporterLogsWrittenOnlyWhenStored(t *testing.T) {
	nanCost := func() Result {
		return Result{Status: StatusOK, Markdown: "Root cause: disk", LatencyS: math.NaN(),
			Investigation: &Investigation{ID: "inv", CostUSD: math.NaN(), Steps: []Step{{N: 1, LatencyS: math.Inf(1)}}}}
	}
	tests := []struct {
		name       string
		sink       *jsonSink
		wantStored int
		wantLog    string
		wantDead   float64
	}{
		{"NaN cost is stored", &jsonSink{}, 1, `"msg":"report: written"`, 0},
		{"store fails", &jsonSink{fail: errors.New("redis: connection refused")}, 0, `"dead_reason":"not_stored"`, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := NewMemoryQueue(0, nil)
			lb := &logBuf{}
			r, _ := newDeadReporter(t, q, &countingWriter{do: nanCost}, tt.sink, lb)
			ctx := context.Background()
			if err := q.Enqueue(ctx, job("t1")); err != nil {
				t.Fatal(err)
			}
			c, _, _ := q.Claim(ctx, "i-test")
			r.handle(c)
			if len(tt.sink.stored) != tt.wantStored {
				t.Fatalf("stored %d results, want %d; log:\n%s", len(tt.sink.stored), tt.wantStored, lb.String())
			}
			if !strings.Contains(lb.String(), tt.wantLog) {
				t.Fatalf("log lacks %s:\n%s", tt.wantLog, lb.String())
			}
			if tt.wantStored == 0 && strings.Contains(lb.String(), "report: written") {
				t.Fatalf("a result that was not stored is logged as written:\n%s", lb.String())
			}
			if got := deadCount(r, DeadNotStored); got != tt.wantDead {
				t.Fatalf("dead-lettered{not_stored} = %g, want %g", got, tt.wantDead)
			}
		})
	}
}

// Every dead-letter reason's series exists at 0 from the start.
func TestReporterDeadSeriesStartAtZero(t *testing.T) {
	r, reg := newDeadReporter(t, NewMemoryQueue(0, nil), writerFunc(func(context.Context, Evidence) Result { return Result{} }), newSink(), &logBuf{})
	_ = r
	if n := testutil.CollectAndCount(reg, "autodiag_report_jobs_dead_lettered_total"); n != len(DeadReasons) {
		t.Fatalf("%d series, want %d", n, len(DeadReasons))
	}
}
