package notify

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/autodiag/autodiag/internal/testenv"
)

// benchDispatcher is one agent with one webhook sink on a local receiver
// that answers 204 and counts, over a Redis outbox.
func benchDispatcher(b *testing.B, workers int) (*Dispatcher, *atomic.Int64, *RedisOutbox) {
	var got atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(rcv.Close)
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), PoolSize: 4 * workers})
	b.Cleanup(func() { rc.Close() })
	ob := NewRedisOutbox(rc, RedisOptions{Prefix: testPrefix(b)})
	b.Cleanup(func() { ob.delKeys(rc) })
	client := NewHTTPClient()
	client.Transport = &http.Transport{MaxIdleConnsPerHost: workers}
	sinks, err := NewSinks([]SinkConfig{{Name: "hook", Type: TypeWebhook, URL: rcv.URL, AllowHTTP: true, On: EventTypes}}, nil, client)
	if err != nil {
		b.Fatal(err)
	}
	d, err := NewDispatcher(ob, sinks, Options{InstanceID: "i-bench", Workers: workers, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Stop(ctx)
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	return d, &got, ob
}

// BenchmarkDispatcherThroughput: events written, then delivered by one
// agent with 32 workers; reports delivered events per second.
func BenchmarkDispatcherThroughput(b *testing.B) {
	d, got, _ := benchDispatcher(b, 32)
	ctx := context.Background()
	ev := failedEvent()
	ev.Time = time.Time{} // now: the test event's fixed time is older than notify_max_age
	start := time.Now()
	for b.Loop() {
		if _, err := d.Enqueue(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
	for got.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}

// BenchmarkDispatcherLatency: events written at 100/s; reports the median
// and 99th percentile of written → delivered.
func BenchmarkDispatcherLatency(b *testing.B) {
	d, got, _ := benchDispatcher(b, 4)
	ctx := context.Background()
	ev := failedEvent()
	ev.Time = time.Time{}
	var lat []time.Duration
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for b.Loop() {
		<-tick.C
		want := got.Load() + 1
		start := time.Now()
		if _, err := d.Enqueue(ctx, ev); err != nil {
			b.Fatal(err)
		}
		for got.Load() < want {
			time.Sleep(100 * time.Microsecond)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// hangingBenchEvents is how many events each phase of
// BenchmarkOutboxHangingSink writes: enough for a rate, few enough for a
// run well under a minute.
const hangingBenchEvents = 2000

// BenchmarkOutboxHangingSink: notifications/s delivered to a healthy
// webhook through a Redis outbox, by one agent with the default 4
// workers, first with the healthy sink alone, then beside a sink that
// never answers (2 s timeout); both measured in the same run, with their
// ratio. Run with -benchtime=1x.
func BenchmarkOutboxHangingSink(b *testing.B) {
	for b.Loop() {
		alone := hangingBenchPhase(b, false)
		beside := hangingBenchPhase(b, true)
		b.ReportMetric(alone, "alone-events/s")
		b.ReportMetric(beside, "beside-hanging-events/s")
		b.ReportMetric(beside/alone, "ratio")
	}
}

// hangingBenchPhase writes hangingBenchEvents events and returns how many
// per second reached the healthy sink, from the first write to the last
// delivery.
func hangingBenchPhase(b *testing.B, withHanging bool) float64 {
	var got atomic.Int64
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer ok.Close()
	hang := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(hang)
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(b), PoolSize: 16})
	defer rc.Close()
	ob := NewRedisOutbox(rc, RedisOptions{Prefix: testPrefix(b)})
	defer ob.delKeys(rc)
	cfgs := []SinkConfig{{Name: "fast", Type: TypeWebhook, URL: ok.URL, AllowHTTP: true, On: EventTypes}}
	if withHanging {
		cfgs = append([]SinkConfig{{Name: "slow", Type: TypeWebhook, URL: hung.URL, AllowHTTP: true, On: EventTypes,
			Timeout: 2 * time.Second}}, cfgs...)
	}
	client := NewHTTPClient()
	client.Transport = &http.Transport{MaxIdleConnsPerHost: DefaultWorkers} // the receivers are on loopback
	sinks, err := NewSinks(cfgs, nil, client)
	if err != nil {
		b.Fatal(err)
	}
	d, err := NewDispatcher(ob, sinks, Options{InstanceID: "i-bench", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		defer cancel()
		_ = d.Stop(ctx)
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	ctx := context.Background()
	ev := failedEvent()
	ev.Time = time.Time{} // now: the test event's fixed time is older than notify_max_age
	start := time.Now()
	for range hangingBenchEvents {
		if _, err := d.Enqueue(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for got.Load() < hangingBenchEvents {
		if time.Now().After(deadline) {
			b.Fatalf("healthy sink had %d of %d events after a minute", got.Load(), hangingBenchEvents)
		}
		time.Sleep(time.Millisecond)
	}
	return hangingBenchEvents / time.Since(start).Seconds()
}
