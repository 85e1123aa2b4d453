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
