package agent

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/autodiag/autodiag/agent/internal/detached"
	"github.com/autodiag/autodiag/agent/open"
	"github.com/autodiag/autodiag/agent/state"
	"github.com/autodiag/autodiag/drain"
)

// The instance record is refreshed every instanceEvery and lives three
// periods, so one missed write does not show the agent as gone; a drained
// agent's record stays a little while for `autodiag status`, and at least
// queue.target_wait (presence.drainedTTL): while it stays, a host-local
// task for the departed machine ends target_draining at once instead of
// waiting queue.target_wait for an agent that is not coming back.
const (
	instanceEvery      = 10 * time.Second
	instanceTTL        = 3 * instanceEvery
	drainedInstanceTTL = time.Minute
)

// presence keeps this instance's record in the state store fresh, and
// with it autodiag_redis_up.
type presence struct {
	store        state.InstanceStore
	storeTimeout time.Duration // redis.timeout
	drain        *drain.Controller
	outcomes     interface{ InFlight() int }
	m            *metrics
	log          *slog.Logger
	instanceID   string
	version      string
	started      time.Time
	asg, az      string // the instance's place, for the in-service indexes
	// names are the host names the agent answers for (state.Instance.Names).
	names []string
	// drainedTTL is how long the record of the drained agent lives: the
	// larger of drainedInstanceTTL and queue.target_wait.
	drainedTTL time.Duration
	// claims, when set, reads which live agents claim each name; after
	// each record write the names another live agent claims too are kept
	// in ambiguous (read by the placement: their target tasks do not run),
	// logged when they change and counted in autodiag_host_names_ambiguous.
	claims    func(ctx context.Context, names []string) (map[string][]string, error)
	ambiguous atomic.Pointer[map[string][]string]
	// hostname is the machine's hostname (one of names, or ""): agents
	// sharing a machine share it, which the warning of its ambiguity says.
	hostname string
	// warned are the names whose ambiguity was logged as a warning: once
	// per name for the agent's life, its later comings and goings at
	// debug. Used by the run loop only.
	warned map[string]bool
	// launchState is the agent's state before a drain when intake does
	// not run (starting, warmed, abandoned; see launch.go), "" when it
	// does; nil = never.
	launchState func() string
	// changed, when set, returns a channel closed at the next change of
	// the launch state (the lifecycle watcher's StateChanged, and nudge):
	// the record is written again at once, so the fleet view does not show
	// a warmed instance as running for a refresh period.
	changed func() <-chan struct{}
	// nudge is sent to (without blocking) when intake opens or is refused.
	nudge chan struct{}

	// down is whether the last record write failed (autodiag_redis_up
	// 0); false until one does.
	down atomic.Bool

	// server, when set (Redis), samples INFO clients of the node nearest
	// its maxclients every open.ServerClientsEvery, after a record write that
	// succeeded: autodiag_redis_server_clients, and a warning on crossing
	// open.NearMaxclients. serverAt and serverNear are the run loop's own.
	server func(context.Context) (open.ServerClients, error)
	// putMu makes the writes one at a time: the refresh loop and the
	// drain's end (drainedPresence) both put, and a put's server sample
	// keeps serverAt and serverNear.
	putMu      sync.Mutex
	serverAt   time.Time
	serverNear bool
}

// run refreshes the record until done is closed, then writes it once more.
func (p *presence) run(ctx context.Context, done <-chan struct{}) {
	t := time.NewTicker(instanceEvery)
	defer t.Stop()
	for {
		var changed <-chan struct{}
		if p.changed != nil {
			changed = p.changed()
		}
		p.put(ctx, instanceTTL)
		select {
		case <-done:
			// Once drained, the last write keeps the drained record's
			// life rather than cutting it to a live one's.
			p.put(ctx, p.ttl())
			return
		case <-t.C:
		case <-changed:
		case <-p.nudge:
		}
	}
}

// ttl is how long the record written now lives: drainedTTL once the
// agent has drained, else instanceTTL.
func (p *presence) ttl() time.Duration {
	if p.drain.State() == drain.Drained {
		return max(p.drainedTTL, drainedInstanceTTL)
	}
	return instanceTTL
}

// put writes the record with ttl, on a call detached from ctx: a drained
// agent still writes its last record. The write is the store check
// (autodiag_redis_up): a store that took it answers.
func (p *presence) put(ctx context.Context, ttl time.Duration) {
	p.putMu.Lock()
	defer p.putMu.Unlock()
	st := p.drain.State().String()
	if p.launchState != nil && p.drain.State() == drain.Running {
		if ls := p.launchState(); ls != "" {
			st = ls
		}
	}
	inst := state.Instance{ID: p.instanceID, State: st, StartedAt: p.started,
		Version: p.version, Inflight: p.outcomes.InFlight(), ASG: p.asg, AZ: p.az, Names: p.names}
	err := detached.Call(ctx, p.storeTimeout, func(ctx context.Context) error { return p.store.PutInstance(ctx, inst, ttl) })
	up := err == nil
	p.down.Store(!up)
	if up {
		p.m.redisUp.Set(1)
		p.checkClaims(ctx)
		p.sampleServer(ctx)
	} else {
		p.m.redisUp.Set(0)
		p.log.Warn("state store unreachable", "err", err)
	}
}

// redisUp is whether the state store took the last record write (true
// before the first).
func (p *presence) redisUp() bool { return !p.down.Load() }

// sampleServer reads the Redis node nearest its maxclients, when a sample
// is due. An agent's pool holds up to workers + 6 connections per node and
// keeps what it opened, so a fleet's bound is agents × that (docs/
// operations.md, "Sizing Redis"); at maxclients the connections the pools
// still open are closed by Redis at once, which the agents see only as
// broken pipes.
func (p *presence) sampleServer(ctx context.Context) {
	if p.server == nil || (!p.serverAt.IsZero() && time.Since(p.serverAt) < open.ServerClientsEvery) {
		return
	}
	p.serverAt = time.Now()
	var s open.ServerClients
	err := detached.Call(ctx, p.storeTimeout, func(ctx context.Context) (err error) {
		s, err = p.server(ctx)
		return err
	})
	if err != nil {
		p.log.Debug("could not read Redis's INFO clients", "err", err)
		return
	}
	p.m.redisServer.WithLabelValues(open.KindConnected).Set(float64(s.Connected))
	p.m.redisServer.WithLabelValues(open.KindMax).Set(float64(s.Max))
	near := s.Share() >= open.NearMaxclients
	switch {
	case near && !p.serverNear:
		p.log.Warn("Redis is near its maxclients: connections the agents' pools open past it are closed at once (broken pipe); raise maxclients to agents × (workers + 6) or more",
			"node", s.Node, "connected_clients", s.Connected, "maxclients", s.Max, "doc", "docs/operations.md#sizing-redis")
	case !near && p.serverNear:
		p.log.Info("Redis is below its maxclients again", "node", s.Node, "connected_clients", s.Connected, "maxclients", s.Max)
	}
	p.serverNear = near
}

// checkClaims learns which of the agent's names another live agent claims
// too (two agents answering for one name: neither may run its host-local
// tasks), logging each change.
func (p *presence) checkClaims(ctx context.Context) {
	if p.claims == nil || len(p.names) == 0 {
		return
	}
	var claims map[string][]string
	err := detached.Call(ctx, p.storeTimeout, func(ctx context.Context) (err error) {
		claims, err = p.claims(ctx, p.names)
		return err
	})
	if err != nil {
		p.log.Debug("could not read who claims this agent's host names", "err", err)
		return
	}
	amb := map[string][]string{}
	for n, ids := range claims {
		if len(ids) > 1 {
			amb[n] = ids
		}
	}
	old := p.ambiguous.Swap(&amb)
	for n, ids := range amb {
		if old != nil && len((*old)[n]) >= 2 {
			continue
		}
		if p.warned[n] {
			p.log.Debug("host name claimed by more than one live agent again", "host", n, "instances", strings.Join(ids, ","))
			continue
		}
		if p.warned == nil {
			p.warned = map[string]bool{}
		}
		p.warned[n] = true
		p.warnAmbiguous(n, ids, amb)
	}
	if old != nil {
		for n := range *old {
			if _, still := amb[n]; !still {
				p.log.Info("host name claimed by this agent alone again", "host", n)
			}
		}
	}
	p.m.ambiguousNames.Set(float64(len(amb)))
}

// warnAmbiguous says, once, that name is claimed by this agent and the
// others in ids: no agent wins it (a task naming it runs nowhere), which
// names still bring tasks here, and, for the machine's hostname, why.
func (p *presence) warnAmbiguous(name string, ids []string, amb map[string][]string) {
	others := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == p.instanceID })
	var still []string
	for _, n := range p.names {
		if _, ok := amb[n]; !ok {
			still = append(still, n)
		}
	}
	attrs := []any{"host", name, "other_instances", strings.Join(others, ","), "answers_for", strings.Join(still, ",")}
	msg := "host name claimed by another live agent too: no agent wins it, and tasks naming it end rejected (ambiguous_host) on every agent until one alone claims it; tasks naming this agent by another of its names run here"
	if name == p.hostname {
		msg = "this machine's hostname is claimed by another live agent too (agents sharing a machine share its hostname): no agent wins it, and tasks naming it end rejected (ambiguous_host) on every agent; name each agent by its instance id or a host_names entry, which run here"
	}
	p.log.Warn(msg, attrs...)
}

// ambiguousClaims is who claims name when another live agent claims it
// too; nil when only this agent does.
func (p *presence) ambiguousClaims(name string) []string {
	amb := p.ambiguous.Load()
	if amb == nil {
		return nil
	}
	return (*amb)[name]
}
