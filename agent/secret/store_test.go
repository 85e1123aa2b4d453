package secret

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/autodiag/autodiag/internal/awssecretsfake"
)

func TestStoreRefreshRotatesAndKeepsLastOnFailure(t *testing.T) {
	fake, url := startFake(t)
	token := fake.PutSecretString("autodiag/intake-token", "tok-1")
	fake.PutParameter("/autodiag/model-key", "key-1", true)
	s := NewStore(testClients(url, awssecretsfake.DefaultRegion), []string{token, "/autodiag/model-key", token}, 0)
	if got := s.Refs(); len(got) != 2 {
		t.Fatalf("Refs = %v; want the two distinct references", got)
	}
	if _, ok := s.Lookup(token); ok {
		t.Fatal("Lookup answered before the first Refresh")
	}
	if n, err := s.Refresh(t.Context()); err != nil || n != 0 {
		t.Fatalf("first Refresh = %d, %v; want 0 changed (first reads are not changes), nil", n, err)
	}
	if v, ok := s.Lookup(token); !ok || v != "tok-1" {
		t.Fatalf("Lookup(token) = %q, %v", v, ok)
	}

	fake.PutSecretString("autodiag/intake-token", "tok-2")
	if n, err := s.Refresh(t.Context()); err != nil || n != 1 {
		t.Fatalf("Refresh after rotation = %d, %v; want 1 changed", n, err)
	}
	if v, _ := s.Lookup(token); v != "tok-2" {
		t.Fatalf("Lookup(token) = %q after rotation; want tok-2", v)
	}

	// The role loses the grant: the last value read stays in force, and
	// the error names the reference, never a value.
	fake.Deny(token)
	fake.PutParameter("/autodiag/model-key", "key-2", true)
	n, err := s.Refresh(t.Context())
	if err == nil || !strings.Contains(err.Error(), token) || n != 1 {
		t.Fatalf("Refresh with a denied secret = %d, %v; want 1 changed and an error naming %s", n, err, token)
	}
	for _, leak := range []string{"tok-1", "tok-2", "key-1", "key-2"} {
		if strings.Contains(err.Error(), leak) {
			t.Fatalf("error %q holds a value", err)
		}
	}
	if v, _ := s.Lookup(token); v != "tok-2" {
		t.Fatalf("Lookup(token) = %q after a failed refresh; want the last value tok-2", v)
	}
	if v, _ := s.Lookup("/autodiag/model-key"); v != "key-2" {
		t.Fatalf("Lookup(model key) = %q; want key-2 (one failure does not stop the others)", v)
	}
}

func TestStoreGetenv(t *testing.T) {
	fake, url := startFake(t)
	arn := fake.PutSecretString("autodiag/hook", "from-store")
	s := NewStore(testClients(url, awssecretsfake.DefaultRegion), []string{arn}, 0)
	if _, err := s.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOOK": "from-env"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	for _, st := range []*Store{s, nil} {
		lookup := st.Getenv(getenv)
		if v, ok := lookup("HOOK"); !ok || v != "from-env" {
			t.Errorf("lookup(HOOK) = %q, %v; want the environment's value", v, ok)
		}
		want := "from-store"
		if st == nil {
			want = ""
		}
		if v, _ := lookup(arn); v != want {
			t.Errorf("lookup(arn) with store %v = %q; want %q", st != nil, v, want)
		}
		if _, ok := lookup("/never/read"); ok {
			t.Errorf("lookup of a reference never read answered")
		}
	}
}

// TestStoreRunRefreshesOnIntervalAndReload: Run reads again at each
// interval and on each reload, and logs counts, never a value.
func TestStoreRunRefreshesOnIntervalAndReload(t *testing.T) {
	fake, url := startFake(t)
	arn := fake.PutSecretString("autodiag/hook", "v1")
	clients := testClients(url, awssecretsfake.DefaultRegion)
	s := NewStore(clients, []string{arn}, 0)
	if _, err := s.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	reload := make(chan struct{})
	// The fake is a real HTTP server: synctest cannot hold its time, so
	// the interval is long and a reload drives the first refresh.
	ctx, cancel := contextWithCancel(t)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, MaxRefresh, reload, log) }()
	fake.PutSecretString("autodiag/hook", "v2")
	reload <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if v, _ := s.Lookup(arn); v == "v2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("reload did not read the rotated value within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if strings.Contains(buf.String(), "v2") || strings.Contains(buf.String(), "v1\"") {
		t.Fatalf("log holds a value:\n%s", buf.String())
	}
}

// TestStoreRunInterval checks the ticker in simulated time with a store
// whose clients answer in process.
func TestStoreRunInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sm := &countingSM{}
		s := NewStore(Clients{SecretsManager: sm}, []string{"arn:aws:secretsmanager:us-east-1:123456789012:secret:x-AbCdEf"}, 0)
		ctx, cancel := contextWithCancel(t)
		done := make(chan struct{})
		go func() { defer close(done); s.Run(ctx, DefaultRefresh, nil, nil) }()
		time.Sleep(3*DefaultRefresh - time.Nanosecond)
		synctest.Wait()
		if got := sm.calls.Load(); got != 2 {
			t.Fatalf("%d reads after just under 3 intervals; want 2", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := sm.calls.Load(); got != 3 {
			t.Fatalf("%d reads after 3 intervals; want 3", got)
		}
		cancel()
		<-done
	})
}

func TestValidateRefresh(t *testing.T) {
	for d, ok := range map[time.Duration]bool{0: true, MinRefresh: true, MaxRefresh: true, time.Second: false, MaxRefresh + 1: false, -time.Minute: false} {
		if err := ValidateRefresh(d); (err == nil) != ok {
			t.Errorf("ValidateRefresh(%s) = %v; want ok=%v", d, err, ok)
		}
	}
}
