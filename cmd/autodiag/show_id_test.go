package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/autodiag/autodiag/agent/config"
)

// TestShowEscapesTheID: `autodiag show ID` without Redis asks the agent for
// that one task: the id is one escaped path segment, so '../../metrics'
// cannot fetch another admin endpoint, and '.' or '..' is not found
// without asking.
func TestShowEscapesTheID(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.RequestURI)
		mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	cfg := config.DefaultConfig()
	addr := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		id, want string // want: the request URI, "" = no request
	}{
		{"../../metrics", "/v1/tasks/..%2F..%2Fmetrics"},
		{"demo-1?x=1#f", "/v1/tasks/demo-1%3Fx=1%23f"},
		{"a b", "/v1/tasks/a%20b"},
		{"..", ""},
		{".", ""},
	}
	for _, tt := range tests {
		mu.Lock()
		seen = nil
		mu.Unlock()
		_, err := lookupTask(t.Context(), cfg, addr, tt.id)
		if !errors.Is(err, errNotFound) {
			t.Errorf("show %q = %v; want not found", tt.id, err)
		}
		mu.Lock()
		got := seen
		mu.Unlock()
		switch {
		case tt.want == "" && len(got) != 0:
			t.Errorf("show %q asked the agent %v; want no request", tt.id, got)
		case tt.want != "" && (len(got) != 1 || got[0] != tt.want):
			t.Errorf("show %q asked the agent %v; want exactly %s", tt.id, got, tt.want)
		}
	}
}
