package redact

import (
	"encoding/base64"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The agent's credentials are redacted by value wherever they occur, in
// their encoded forms too, and a rotated value applies at the next
// Redact; values below MinKnownLen are left alone.
func TestKnownValues(t *testing.T) {
	r, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	vals := []string{"wh0le/Sec+ret=9", "a", "short7x"}
	r.SetKnown(func() []string { mu.Lock(); defer mu.Unlock(); return vals })
	const v = "wh0le/Sec+ret=9"
	basic := base64.StdEncoding.EncodeToString([]byte("ops:" + v))
	for _, tc := range []struct{ name, in string }{
		{"raw", "webhook answered 401 for key " + v + " today"},
		{"query escaped", "GET /hook?k=" + url.QueryEscape(v) + "&x=1"},
		{"path escaped", "GET /hook/" + url.PathEscape(v) + "/x"},
		{"json", `{"k":"` + strings.ReplaceAll(v, "/", `\/`) + `"}`},
		{"base64", "token " + base64.StdEncoding.EncodeToString([]byte(v)) + " end"},
		{"base64url", "token " + base64.URLEncoding.EncodeToString([]byte(v)) + " end"},
		{"inside basic auth", "curl -H 'X-Auth: Basic " + basic + "'"},
		{"inside basic auth, offset 1", "X: " + base64.StdEncoding.EncodeToString([]byte("ab:"+v+"!"))},
		{"inside basic auth, offset 2", "X: " + base64.StdEncoding.EncodeToString([]byte("abcde:"+v))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := r.RedactString(tc.in)
			if !strings.Contains(out, Marker(KnownRule)) {
				t.Errorf("no %s marker in %q", KnownRule, out)
			}
			if strings.Contains(out, "Sec+ret") || strings.Contains(out, "Sec%2Bret") {
				t.Errorf("value left in %q", out)
			}
		})
	}
	// Short values are not redacted by value: "a" is in every line.
	if in := "a cat sat; short7x"; r.RedactString(in) != in {
		t.Errorf("short values redacted: %q", r.RedactString(in))
	}
	// A rotation applies at the next call.
	mu.Lock()
	vals = []string{"n3w-Rotated-Value"}
	mu.Unlock()
	if out := r.RedactString("k=" + v + " n3w-Rotated-Value"); strings.Contains(out, "n3w-Rotated") || !strings.Contains(out, v) {
		t.Errorf("after a rotation: %q", out)
	}
	if got := testutil.ToFloat64(r.counts.WithLabelValues(KnownRule)); got < 9 {
		t.Errorf("%s count %v, want at least 9", KnownRule, got)
	}
}

// With the rules turned off (results.redact: []), the agent's own
// credentials are still redacted.
func TestKnownValuesWithoutRules(t *testing.T) {
	r, err := New([]Rule{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.SetKnown(func() []string { return []string{"hunter2hunter2"} })
	if out := r.RedactString("pw hunter2hunter2"); out != "pw "+Marker(KnownRule) {
		t.Errorf("got %q", out)
	}
}
