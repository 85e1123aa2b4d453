package supervisor

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/drain"
	"github.com/autodiag/autodiag/lifecycle"
)

// drainStore persists the drain so that a restarted agent resumes it.
type drainStore struct {
	store        state.DrainStore
	storeTimeout time.Duration // redis.timeout
	instanceID   string
	drain        *drain.Controller
	log          *slog.Logger
}

// persist saves the drain so that a restarted agent resumes it.
func (ds *drainStore) persist(ctx context.Context, tr *drainTrigger, action *lifecycle.Action, completed bool) {
	rec := state.DrainRecord{Reason: tr.Reason, Source: tr.Source, Completed: completed}
	p := ds.drain.Progress()
	rec.StartedAt, rec.Deadline = p.StartedAt, p.Deadline
	if !tr.since.IsZero() {
		rec.StartedAt = tr.since
	}
	if action != nil {
		rec.Action, _ = json.Marshal(action)
	}
	if err := ds.save(ctx, rec); err != nil {
		ds.log.Warn("persisting drain state failed", "err", err)
	}
}

// load reads the drain a previous process persisted; nil when none.
func (ds *drainStore) load(ctx context.Context) (*state.DrainRecord, error) {
	var rec *state.DrainRecord
	err := ds.storeCall(ctx, func(ctx context.Context) (err error) {
		rec, err = ds.store.LoadDrain(ctx, ds.instanceID)
		return err
	})
	return rec, err
}

// save writes rec as this instance's drain.
func (ds *drainStore) save(ctx context.Context, rec state.DrainRecord) error {
	return ds.storeCall(ctx, func(ctx context.Context) error { return ds.store.SaveDrain(ctx, ds.instanceID, rec) })
}

// storeCall runs one store call, bounded by redis.timeout and detached
// from ctx's end: the drain's bookkeeping happens during a fast exit too.
func (ds *drainStore) storeCall(ctx context.Context, call func(context.Context) error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ds.storeTimeout)
	defer cancel()
	return call(sctx)
}
