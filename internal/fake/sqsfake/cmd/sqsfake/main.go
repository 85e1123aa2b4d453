// Command sqsfake serves the internal/fake/sqsfake SQS fake on an address for manual
// demos and for running the autodiag binary against it:
//
//	go run ./internal/fake/sqsfake/cmd/sqsfake -addr 127.0.0.1:4566 -queue tasks -queue tasks-dlq
//	AWS_ENDPOINT_URL_SQS=http://127.0.0.1:4566 AWS_REGION=us-east-1 \
//	AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x autodiag run ...
//
// Queue URLs are http://<addr>/000000000000/<name>.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

func main() { os.Exit(run()) }

type queueFlags []string

func (q *queueFlags) String() string     { return strings.Join(*q, ",") }
func (q *queueFlags) Set(v string) error { *q = append(*q, v); return nil }

func run() int {
	var queues queueFlags
	addr := flag.String("addr", "127.0.0.1:4566", "listen address")
	region := flag.String("region", sqsfake.DefaultRegion, "region used in queue ARNs")
	flag.Var(&queues, "queue", "queue to create at start, `name[:Attr=Value,...]` (repeatable), e.g. tasks:VisibilityTimeout=60")
	flag.Parse()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		logger.Error("listen", "err", err)
		return 1
	}
	srv := sqsfake.New(sqsfake.WithRegion(*region), sqsfake.WithBaseURL("http://"+ln.Addr().String()))
	for _, spec := range queues {
		name, attrs, err := parseQueue(spec)
		if err == nil {
			var url string
			url, err = srv.CreateQueue(name, attrs)
			logger.Info("queue", "url", url)
		}
		if err != nil {
			logger.Error("create queue", "spec", spec, "err", err)
			return 2
		}
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close() // end long polls so Shutdown does not wait 20 s
		// ctx has ended: the shutdown gets its own bound.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	logger.Info("serving", "addr", ln.Addr().String())
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error("serve", "err", err)
		return 1
	}
	for op, n := range srv.Counters() {
		logger.Info("requests", "op", op, "count", n)
	}
	return 0
}

func parseQueue(spec string) (string, map[string]string, error) {
	name, rest, _ := strings.Cut(spec, ":")
	attrs := map[string]string{}
	if rest == "" {
		return name, attrs, nil
	}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return "", nil, fmt.Errorf("queue %s: attribute %q is not Attr=Value", name, kv)
		}
		attrs[k] = v
	}
	return name, attrs, nil
}
