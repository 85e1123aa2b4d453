package notify

import (
	"context"
	"errors"
	"log/slog"
)

// upkeep keeps the outbox in shape between deliveries: it moves entries
// of the legacy layout, sheds what is past its age or the cap, counts the
// pending entries and what a failed claim means.
type upkeep struct {
	ob    Outbox
	order []Sink
	o     Options
	log   *slog.Logger
	m     *metrics
}

// migrateLegacy moves entries an earlier version wrote (or still writes,
// during a rolling upgrade) into this version's lanes.
func (uk *upkeep) migrateLegacy(ctx context.Context) {
	m, ok := uk.ob.(legacyMigrator)
	if !ok {
		return
	}
	names := make([]string, len(uk.order))
	for i, s := range uk.order {
		names[i] = s.Name()
	}
	cctx, cancel := context.WithTimeout(ctx, uk.o.StoreTimeout)
	defer cancel()
	n, err := m.MigrateLegacy(cctx, names)
	switch {
	case err != nil && !errors.Is(err, context.Canceled):
		uk.log.Warn("notification outbox: move entries of the earlier layout", "err", err)
	case n > 0:
		uk.log.Info("notification entries of the earlier outbox layout moved to their sinks' lanes", "count", n)
	}
}

// shed dead-letters, counts and logs the entries past the outbox's cap,
// sink by sink: nothing is dropped without a trace.
func (uk *upkeep) shed(ctx context.Context) {
	for _, s := range uk.order {
		for range 100 {
			cctx, cancel := context.WithTimeout(ctx, uk.o.StoreTimeout)
			dead, err := uk.ob.Shed(cctx, s.Name(), shedLimit)
			cancel()
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					uk.log.Warn("notification outbox: shed entries past the cap", "sink", s.Name(), "err", err)
				}
				break
			}
			if len(dead) == 0 {
				break
			}
			ids := make([]string, 0, min(len(dead), maxLoggedIDs))
			for _, e := range dead {
				uk.m.count(Delivery{Entry: e.Entry}, ResultDead)
				uk.m.dropped.WithLabelValues(e.Sink, ReasonOutboxFull).Inc()
				if len(ids) < maxLoggedIDs {
					ids = append(ids, e.ID)
				}
			}
			uk.log.Error("notifications given up: the outbox is full", "sink", s.Name(), "reason", ReasonOutboxFull,
				"count", len(dead), "max_len", uk.ob.MaxLen(), "delivery_ids", ids)
			if len(dead) < shedLimit {
				break
			}
		}
	}
}

func (uk *upkeep) claimFailed(err error) {
	if errors.Is(err, ErrReset) {
		uk.m.resets.Inc()
		uk.log.Error("notification outbox was reset; pending notifications are lost", "err", err)
		return
	}
	if !errors.Is(err, context.Canceled) {
		uk.log.Warn("claim notifications", "err", err)
	}
}

func (uk *upkeep) updatePending(ctx context.Context) {
	var total int64
	for _, s := range uk.order {
		cctx, cancel := context.WithTimeout(ctx, uk.o.StoreTimeout)
		n, err := uk.ob.Pending(cctx, s.Name())
		cancel()
		if err != nil {
			return
		}
		uk.m.entries.WithLabelValues(s.Name()).Set(float64(n))
		total += n
	}
	uk.m.pending.Set(float64(total))
}
