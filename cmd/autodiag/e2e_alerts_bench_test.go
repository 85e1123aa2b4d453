package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/agent/alert/listener"
	"github.com/autodiag/autodiag/agent/config"
	"github.com/autodiag/autodiag/agent/task"
	"github.com/autodiag/autodiag/agent/taskview"
)

// BenchmarkAlertListener measures alerts accepted into the SQS fake per
// second, b.N alerts per run, in payloads of benchAlertsPerPayload (one
// SendMessageBatch each) from benchSenders concurrent senders:
//
//   - plain-batch: the tasks those alerts become, already built, sent with
//     a plain SendMessageBatch loop: the floor of any router;
//   - listener: the same alerts posted as generic payloads to the alert
//     listener's handler (decode, route, validate, SendMessageBatch) over HTTP;
//   - listener-paced: the listener at benchPacedRate alerts/s, for the accept
//     latency a sender sees at that load (p99_ms).
//
// Run with a fixed count, e.g.
//
//	go test -run '^$' -bench AlertListener -benchtime 20000x ./cmd/autodiag
func BenchmarkAlertListener(b *testing.B) {
	b.Run("plain-batch", func(b *testing.B) {
		fq := newSQSFake(b, "tasks")
		tasks := benchTasks(b.N)
		b.ResetTimer()
		lat := fanOut(b, len(tasks), 0, func(i, n int) {
			entries := make([]types.SendMessageBatchRequestEntry, n)
			for j := range n {
				body, _ := json.Marshal(&tasks[i+j])
				entries[j] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), MessageBody: aws.String(string(body))}
			}
			out, err := fq.client.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(fq.url), Entries: entries})
			if err != nil || len(out.Failed) > 0 {
				b.Error("send failed", err)
			}
		})
		report(b, fq, lat)
	})
	post := func(b *testing.B, rate float64) {
		fq := newSQSFake(b, "tasks")
		srv := benchListenerServer(b, fq)
		payloads := benchPayloads(b.N)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchSenders}}
		b.ResetTimer()
		lat := fanOut(b, b.N, rate, func(i, _ int) {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/v1/alerts/generic",
				bytes.NewReader(payloads[i/benchAlertsPerPayload]))
			if err != nil {
				b.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			// Read to the end, so the connection is reused.
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Error("alert listener answered", resp.Status)
			}
		})
		report(b, fq, lat)
	}
	b.Run("listener", func(b *testing.B) { post(b, 0) })
	b.Run("listener-paced", func(b *testing.B) { post(b, benchPacedRate) })
}

const (
	benchAlertsPerPayload = 10
	benchSenders          = 4
	benchPacedRate        = 1000 // alerts/s
)

// benchListenerServer serves the alert listener's handler of an agent config routing
// every generic alert to one uptime task, onto fq.
func benchListenerServer(b *testing.B, fq *sqsFake) *httptest.Server {
	b.Helper()
	cfg, err := config.Load([]byte(`
intake: {addr: '127.0.0.1:0'}
routes:
  - name: all
    match: {source: [generic]}
    tasks: [{diagnostic: uptime}]
`), nil)
	if err != nil {
		b.Fatal(err)
	}
	h, err := listener.NewHandler(cfg, listener.Options{Sender: listener.NewSQSSender(fq.client, fq.url)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv
}

func benchTasks(n int) []task.Task {
	ts := make([]task.Task, n)
	now := time.Now().UTC()
	for i := range ts {
		ts[i] = task.Task{ID: fmt.Sprintf("alert-%d", i), Host: fmt.Sprintf("web-%d", i%50), Diagnostic: "uptime",
			Alert: taskview.Alert{Source: "generic", Name: "HighLoad", EventID: fmt.Sprintf("ev-%d", i)}, CreatedAt: now}
	}
	return ts
}

func benchPayloads(n int) [][]byte {
	var out [][]byte
	for i := 0; i < n; i += benchAlertsPerPayload {
		var alerts []map[string]any
		for j := i; j < min(i+benchAlertsPerPayload, n); j++ {
			alerts = append(alerts, map[string]any{"name": "HighLoad", "host": fmt.Sprintf("web-%d", j%50), "event_id": fmt.Sprintf("ev-%d", j)})
		}
		body, _ := json.Marshal(alerts)
		out = append(out, body)
	}
	return out
}

// fanOut calls send(first, count) for every chunk of benchAlertsPerPayload
// of n alerts from benchSenders goroutines; rate > 0 paces the chunks to
// rate alerts/s overall. It returns each call's latency.
func fanOut(b *testing.B, n int, rate float64, send func(first, count int)) []time.Duration {
	chunks := make(chan int, n/benchAlertsPerPayload+1)
	start := time.Now()
	go func() {
		defer close(chunks)
		for i, k := 0, 0; i < n; i, k = i+benchAlertsPerPayload, k+1 {
			if rate > 0 {
				due := start.Add(time.Duration(float64(k*benchAlertsPerPayload) / rate * float64(time.Second)))
				time.Sleep(time.Until(due))
			}
			chunks <- i
		}
	}()
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for range benchSenders {
		wg.Go(func() {
			for i := range chunks {
				t0 := time.Now()
				send(i, min(benchAlertsPerPayload, n-i))
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat
}

func report(b *testing.B, fq *sqsFake, lat []time.Duration) {
	b.StopTimer()
	if _, _, _, st := fq.stats(b); st.Sent != b.N {
		b.Fatalf("queue took %d messages, want %d", st.Sent, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "alerts/s")
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
	}
}
