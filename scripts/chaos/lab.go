package main

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/autodiag/autodiag/internal/harness"
)

// lab is the harness's lab with the paths of the tools some scenes need.
type lab struct {
	*harness.Lab
	toxi string // toxiproxy-server binary, "" when not installed
	imds string // ec2-metadata-mock binary, "" when not installed
}

// send puts bodies on the queue at url.
func (l *lab) send(url string, bodies ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := l.SQS.Send(ctx, url, bodies...)
	return err
}

// outcomes are the agent's outcome counters, asked with a 10 s bound.
func outcomes(a *harness.Agent) map[string]int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.Outcomes(ctx)
}

// metric sums the agent's series of name with every one of labels, asked
// with a 10 s bound.
func metric(a *harness.Agent, name string, labels ...string) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.Metric(ctx, name, labels...)
}

// post sends a JSON body to the agent's admin API; the bound is generous
// because a burst queues at the intake.
func post(a *harness.Agent, client *http.Client, path, body string) (int, map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return a.Post(ctx, client, path, body)
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s" }
