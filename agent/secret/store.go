package secret

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// Bounds of secrets_refresh: often enough that a rotation applies within
// minutes, rarely enough that a fleet's reads stay cheap (each read of
// each reference is one API call per agent).
const (
	DefaultRefresh = 10 * time.Minute
	MinRefresh     = time.Minute
	MaxRefresh     = 24 * time.Hour
)

// DefaultFetchTimeout bounds one reference's fetch, the SDK's retries
// included.
const DefaultFetchTimeout = 15 * time.Second

// Store holds the values of the credential references a configuration
// names (admin and alert listener tokens, webhook URLs and keys, the model's key),
// fetched with the instance role at start and again on Refresh, so a
// rotated secret applies without a restart. A failed refresh keeps the
// last value read: a credential never disappears while the agent runs.
// Values are returned by Lookup only, never logged, never in an error.
type Store struct {
	clients Clients
	refs    []string
	timeout time.Duration

	mu   sync.RWMutex
	vals map[string]string
}

// NewStore returns a store of refs (duplicates collapse) read with
// clients; timeout bounds each fetch (0: DefaultFetchTimeout). It holds
// nothing until Refresh.
func NewStore(clients Clients, refs []string, timeout time.Duration) *Store {
	if timeout <= 0 {
		timeout = DefaultFetchTimeout
	}
	r := slices.Clone(refs)
	slices.Sort(r)
	return &Store{clients: clients, refs: slices.Compact(r), timeout: timeout, vals: map[string]string{}}
}

// Refs are the references the store reads, sorted.
func (s *Store) Refs() []string { return slices.Clone(s.refs) }

// Refresh reads every reference once, each within the store's timeout, and
// keeps what it read; a reference that fails keeps its previous value (if
// any). It returns how many values changed and every failure joined, each
// naming its reference and never the value.
func (s *Store) Refresh(ctx context.Context) (changed int, err error) {
	var errs []error
	for _, ref := range s.refs {
		fctx, cancel := context.WithTimeout(ctx, s.timeout)
		v, ferr := Fetch(fctx, ref, s.clients)
		cancel()
		if ferr != nil {
			errs = append(errs, ferr)
			continue
		}
		v = strings.TrimSpace(v)
		s.mu.Lock()
		if old, ok := s.vals[ref]; !ok || old != v {
			if ok {
				changed++
			}
			s.vals[ref] = v
		}
		s.mu.Unlock()
	}
	return changed, errors.Join(errs...)
}

// Lookup returns ref's value as last read; false when it was never read.
// A nil store holds nothing.
func (s *Store) Lookup(ref string) (string, bool) {
	if s == nil {
		return "", false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.vals[ref]
	return v, ok
}

// Getenv is the one resolver of credential names: a name that is a secret
// reference (an ARN, or an SSM parameter name starting with "/") is looked
// up in the store, any other name through env (os.LookupEnv in cmd). A
// *_secret key and its *_env sibling are read by the same code that way.
// A nil store reads env only.
func (s *Store) Getenv(env func(string) (string, bool)) func(string) (string, bool) {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	return func(name string) (string, bool) {
		if IsRef(name) {
			return s.Lookup(name)
		}
		return env(name)
	}
}

// IsRef reports whether name is shaped like a secret reference rather than
// an environment variable name (which can start with neither "/" nor
// "arn:").
func IsRef(name string) bool {
	return strings.HasPrefix(name, "/") || strings.HasPrefix(name, "arn:")
}

// Run refreshes the store every interval and whenever reload receives
// (SIGHUP in the agent) until ctx ends; it logs each refresh's count and
// every failure, never a value. interval <= 0 refreshes on reload only.
func (s *Store) Run(ctx context.Context, interval time.Duration, reload <-chan struct{}, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		var why string
		select {
		case <-ctx.Done():
			return
		case <-tick:
			why = "interval"
		case <-reload:
			why = "reload"
		}
		changed, err := s.Refresh(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("secrets refresh failed; the last values read stay in force", "reason", why, "err", err)
			continue
		}
		log.Info("secrets refreshed", "reason", why, "refs", len(s.refs), "changed", changed)
	}
}

// ValidateRefresh checks secrets_refresh (0: DefaultRefresh).
func ValidateRefresh(d time.Duration) error {
	if d != 0 && (d < MinRefresh || d > MaxRefresh) {
		return fmt.Errorf("%s: must be between %s and %s (0: %s)", d, MinRefresh, MaxRefresh, DefaultRefresh)
	}
	return nil
}
