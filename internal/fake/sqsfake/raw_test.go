package sqsfake_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/autodiag/autodiag/internal/fake/sqsfake"
)

func rawCall(srv *sqsfake.Server, op, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "http://sqs.test:4566/", strings.NewReader(body))
	req.Header.Set("X-Amz-Target", "AmazonSQS."+op)
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}
