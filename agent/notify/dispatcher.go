package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/autodiag/autodiag/internal/clock"
)

// Defaults of Options.
const (
	DefaultWorkers      = 4
	DefaultPollInterval = time.Second
	DefaultMaxAttempts  = 10
	DefaultBackoffBase  = 2 * time.Second
	DefaultBackoffMax   = 10 * time.Minute
	DefaultStoreTimeout = time.Second
)

// Results of autodiag_notifications_total.
const (
	ResultDelivered = "delivered"
	ResultRetry     = "retry"
	ResultDead      = "dead"
)

// Options configure a Dispatcher; zero values mean the defaults.
type Options struct {
	// InstanceID names this agent: the outbox consumer and the events'
	// instance_id and origin. Required.
	InstanceID string
	// Workers is how many deliveries run at once (DefaultWorkers), split
	// evenly into one lane per sink (at least one worker each, rounded
	// up): a sink that hangs holds only its own lane's workers, and each
	// lane claims only its own sink's entries.
	Workers int
	// PollInterval is how often an idle dispatcher looks for work others
	// wrote or gave up (DefaultPollInterval); its own Enqueue wakes it at
	// once.
	PollInterval time.Duration
	// MaxAttempts: an entry that failed this many times is dead
	// (DefaultMaxAttempts).
	MaxAttempts int
	// MaxAge (notify_max_age): an entry older than this is dead instead of
	// retried (DefaultMaxAge).
	MaxAge time.Duration
	// BackoffBase and BackoffMax shape the retry delay: base·2^(attempt-1),
	// at most max, with full jitter over its upper half; a longer
	// Retry-After wins.
	BackoffBase, BackoffMax time.Duration
	// StoreTimeout bounds each outbox call (DefaultStoreTimeout); use
	// redis.timeout's order of magnitude.
	StoreTimeout time.Duration
	Clock        clock.Clock           // nil: the wall clock
	Logger       *slog.Logger          // slog.Default()
	Registerer   prometheus.Registerer // nil: metrics are not registered
	// Rand returns a number in [0, 1) for jitter (math/rand/v2).
	Rand func() float64
}

// Dispatcher writes events to the outbox and delivers the outbox's
// entries to the sinks with a bounded pool of workers.
type Dispatcher struct {
	ob    Outbox
	sinks map[string]Sink
	order []Sink
	o     Options
	log   *slog.Logger
	m     *metrics

	wake chan struct{} // a local Enqueue or a finished delivery
	stop chan struct{} // closed by Stop
	done chan struct{} // closed when Run returned
	// direct holds this agent's own entries to deliver while draining.
	direct chan Delivery

	mu            sync.Mutex
	started       bool
	stopped       bool
	draining      bool
	cancelDeliver context.CancelFunc

	delivery *deliverer
	upkeep   *upkeep
}

// NewDispatcher returns a Dispatcher of sinks over ob. A sink whose
// Timeout is more than half of ob.ClaimIdle() is an error: a delivery
// still running would be taken over by another agent.
func NewDispatcher(ob Outbox, sinks []Sink, o Options) (*Dispatcher, error) {
	if o.InstanceID == "" {
		return nil, errors.New("notify: dispatcher: InstanceID is required")
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = DefaultBackoffMax
	}
	if o.StoreTimeout <= 0 {
		o.StoreTimeout = DefaultStoreTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.Wall{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	d := &Dispatcher{ob: ob, sinks: map[string]Sink{}, o: o, log: o.Logger.With("component", "notify"),
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		direct: make(chan Delivery, 64)}
	for _, s := range sinks {
		if 2*s.Timeout() > ob.ClaimIdle() {
			return nil, fmt.Errorf("notify: sink %s: timeout %s must be at most half the outbox claim idle time %s",
				s.Name(), s.Timeout(), ob.ClaimIdle())
		}
		if _, dup := d.sinks[s.Name()]; dup {
			return nil, fmt.Errorf("notify: sink %s is configured twice", s.Name())
		}
		d.sinks[s.Name()] = s
		d.order = append(d.order, s)
	}
	m, err := newMetrics(o.Registerer, sinks)
	if err != nil {
		return nil, err
	}
	m.maxLen.Set(float64(ob.MaxLen()))
	d.m = m
	for _, s := range sinks {
		if g, ok := s.(interface{ setURLRefused(func(error)) }); ok {
			name := s.Name()
			g.setURLRefused(func(err error) {
				m.urlRefused.WithLabelValues(name).Inc()
				d.log.Warn("notify: the sink's rotated URL breaks the outbound URL rules and is not used; the last good URL stays in force",
					"sink", name, "err", err)
			})
		}
	}
	d.delivery = &deliverer{ob: ob, sinks: d.sinks, o: o, log: d.log, m: m}
	d.upkeep = &upkeep{ob: ob, order: d.order, o: o, log: d.log, m: m}
	return d, nil
}

// Entries are the outbox entries of ev, one per sink that wants it, with
// ev's ID, Time and InstanceID set when empty and the task output cut to
// MaxOutputExcerpt. A caller that writes them itself (RedisOutbox.AddTo,
// in the pipeline of the task's final record) uses this; Enqueue does both.
func (d *Dispatcher) Entries(ev Event) ([]Entry, error) {
	if ev.ID == "" {
		ev.ID = NewID()
	}
	if ev.Time.IsZero() {
		ev.Time = d.o.Clock.Now().UTC()
	}
	if ev.InstanceID == "" {
		ev.InstanceID = d.o.InstanceID
	}
	if ev.Task != nil {
		t := *ev.Task
		show := "autodiag show " + t.ID
		if t.OutputURL != "" {
			show = t.OutputURL
		}
		t.Output = Excerpt(t.Output, MaxOutputExcerpt, show)
		ev.Task = &t
	}
	var out []Entry
	var body []byte
	for _, s := range d.order {
		if !s.Wants(ev.Type) {
			continue
		}
		if t, ok := s.(Targeter); ok && !t.HasTarget(ev) {
			continue
		}
		if body == nil {
			var err error
			if body, err = json.Marshal(ev); err != nil {
				return nil, fmt.Errorf("notify: encode %s event: %w", ev.Type, err)
			}
		}
		out = append(out, Entry{ID: ev.ID, Sink: s.Name(), Event: ev.Type, Origin: d.o.InstanceID, Time: ev.Time, Body: body})
	}
	return out, nil
}

// Enqueue writes ev for every sink that wants it, in one outbox round
// trip bounded by ctx, and returns: delivery happens on the workers. It
// returns the event's delivery id ("" when no sink wants it).
func (d *Dispatcher) Enqueue(ctx context.Context, ev Event) (string, error) {
	entries, err := d.Entries(ev)
	if err != nil || len(entries) == 0 {
		return "", err
	}
	if err := d.EnqueueEntries(ctx, entries); err != nil {
		return "", err
	}
	return entries[0].ID, nil
}

// EnqueueEntries writes entries (from Entries) to the outbox in one round
// trip bounded by ctx, then does what Enqueued does.
func (d *Dispatcher) EnqueueEntries(ctx context.Context, entries []Entry) error {
	refs, err := d.ob.Enqueue(ctx, entries)
	if err != nil {
		return err
	}
	d.Enqueued(entries, refs)
	return nil
}

// Enqueued tells the dispatcher that entries were written to its outbox
// under refs (their stream ids), by it or by a caller that wrote them
// with something else (RedisOutbox.AddArgs in the task's final record):
// it wakes the workers and, while draining, delivers them itself.
func (d *Dispatcher) Enqueued(entries []Entry, refs []string) {
	d.mu.Lock()
	draining := d.draining && !d.stopped
	d.mu.Unlock()
	if draining {
		// A draining agent claims nothing from the outbox, but its own
		// events go out from here; should it stop first, they stay in
		// the outbox for the others.
		for i, e := range entries {
			if i >= len(refs) {
				break
			}
			select {
			case d.direct <- Delivery{Entry: e, Attempt: 1, ref: refs[i]}:
			default:
			}
		}
	}
	d.signal()
}

// Outbox is the outbox the dispatcher writes to and delivers from.
func (d *Dispatcher) Outbox() Outbox { return d.ob }

func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Drain stops claiming from the outbox: what this agent holds is still
// delivered, and so are the events it enqueues from now on, until Stop.
func (d *Dispatcher) Drain() {
	d.mu.Lock()
	d.draining = true
	d.mu.Unlock()
	d.signal()
}

// Run claims and delivers until ctx is done or Stop is called, then waits
// for the deliveries it started (each bounded by its sink's timeout, or
// cut short by Stop's deadline) and returns nil. It runs once.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.started {
		d.mu.Unlock()
		return errors.New("notify: dispatcher: Run called twice")
	}
	d.started = true
	if d.stopped {
		// Stop came first and waited for nothing: a delivery started now
		// would have no bound but its sink's timeout.
		d.mu.Unlock()
		close(d.done)
		return nil
	}
	// Deliveries outlive a cancelled ctx (SIGTERM stops intake, not work
	// in flight); Stop's deadline cancels them.
	deliverCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.cancelDeliver = cancel
	d.mu.Unlock()

	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		cancel()
		close(d.done)
	}()
	share := max(1, (d.o.Workers+len(d.order)-1)/max(1, len(d.order)))
	lanes := make(map[string]*lane, len(d.order))
	for _, s := range d.order {
		lanes[s.Name()] = &lane{sink: s.Name(), slots: make(chan struct{}, share)}
	}
	start := func(l *lane, dl Delivery, direct bool) {
		l.slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-l.slots; wg.Done(); d.signal() }()
			d.delivery.deliver(deliverCtx, dl, direct)
		}()
	}
	// takeDirect moves this agent's own entries handed over while
	// draining into their lanes' backlogs; runDirect starts what room
	// allows (all of it, waiting for room, when flushing before Stop's
	// bound decides whether they are sent).
	takeDirect := func() {
		for {
			select {
			case dl := <-d.direct:
				if l, ok := lanes[dl.Sink]; ok {
					l.direct = append(l.direct, dl)
				}
			default:
				return
			}
		}
	}
	runDirect := func(l *lane, all bool) int {
		n := 0
		for len(l.direct) > 0 && (all || l.free() > 0) {
			start(l, l.direct[0], true)
			l.direct = l.direct[1:]
			n++
		}
		return n
	}
	flushDirect := func() {
		takeDirect()
		for _, s := range d.order {
			runDirect(lanes[s.Name()], true)
		}
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var lastPending time.Time // the gauges are read from the outbox once per PollInterval
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.stop:
			flushDirect()
			return nil
		default:
		}
		d.mu.Lock()
		draining := d.draining
		d.mu.Unlock()
		// Past the cap, the oldest entries are shed before claiming, so
		// that what is shed is rarely in flight here.
		poll := time.Since(lastPending) >= d.o.PollInterval
		if poll {
			lastPending = time.Now()
			d.upkeep.migrateLegacy(ctx)
			d.upkeep.shed(ctx)
		}
		takeDirect()
		more := false
		for _, s := range d.order {
			l := lanes[s.Name()]
			got := runDirect(l, false)
			if free := l.free(); free > 0 && !draining {
				cctx, ccancel := context.WithTimeout(ctx, d.o.StoreTimeout)
				ds, err := d.ob.Claim(cctx, d.o.InstanceID, l.sink, free, true)
				ccancel()
				if err != nil {
					d.upkeep.claimFailed(err)
				}
				for _, dl := range ds {
					start(l, dl, false)
				}
				got += len(ds)
			}
			if got > 0 && l.free() > 0 {
				more = true
			}
		}
		if poll {
			d.upkeep.updatePending(ctx)
		}
		if more {
			continue
		}
		timer.Reset(d.o.PollInterval)
		select {
		case <-ctx.Done():
			return nil
		case <-d.stop:
			flushDirect()
			return nil
		case <-d.wake:
		case <-timer.C:
		}
	}
}

// legacyMigrator is an outbox that can move the entries of an earlier
// layout into its own (*RedisOutbox).
type legacyMigrator interface {
	MigrateLegacy(ctx context.Context, sinks []string) (int, error)
}

// lane is the share of the workers of one sink.
type lane struct {
	sink   string
	slots  chan struct{} // one per delivery running
	direct []Delivery    // this agent's own entries to send while draining
}

func (l *lane) free() int { return cap(l.slots) - len(l.slots) }

// shedLimit bounds the entries one Shed call moves; shed calls again
// while a call moved that many.
const shedLimit = 1000

// maxLoggedIDs bounds the delivery ids one shed log line lists; the dead
// list has them all.
const maxLoggedIDs = 100

// Stop stops claiming and waits for the deliveries in flight until ctx is
// done; then it cancels them (their entries stay pending, for another
// agent to take over after the claim idle time) and returns ctx.Err()
// without waiting further. A Stop before Run returns at once.
func (d *Dispatcher) Stop(ctx context.Context) error {
	d.mu.Lock()
	if !d.stopped {
		d.stopped = true
		close(d.stop)
	}
	started, cancel := d.started, d.cancelDeliver
	d.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-d.done:
		return nil
	case <-ctx.Done():
		cancel()
		return fmt.Errorf("notify: stop: deliveries cut short: %w", ctx.Err())
	}
}

type metrics struct {
	total   *prometheus.CounterVec
	dropped *prometheus.CounterVec
	pending prometheus.Gauge
	entries *prometheus.GaugeVec
	maxLen  prometheus.Gauge
	delay   prometheus.Histogram
	resets  prometheus.Counter
	// urlRefused counts rotated sink URLs the outbound URL rules refused.
	urlRefused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, sinks []Sink) (*metrics, error) {
	m := &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_notifications_total",
			Help: "Notification attempts by sink, event and result (delivered, retry, dead).",
		}, []string{"sink", "event", "result"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_notifications_dropped_total",
			Help: "Notifications given up before any delivery was tried to the end, by sink and reason (outbox_full); also counted as dead.",
		}, []string{"sink", "reason"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autodiag_outbox_pending",
			Help: "Notifications in the outbox: new, in flight or waiting to retry.",
		}),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "autodiag_outbox_entries",
			Help: "Notifications in the outbox by sink: new, in flight or waiting to retry.",
		}, []string{"sink"}),
		maxLen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "autodiag_outbox_max_entries",
			Help: "Cap of each sink's lane of the outbox; entries past it are dead-lettered (outbox_full).",
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "autodiag_notification_delay_seconds",
			Help:    "Time from an event written to the outbox to its delivery.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 5, 30, 120, 600, 3600},
		}),
		resets: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "autodiag_outbox_resets_total",
			Help: "Times the notification outbox was found gone (Redis restarted empty) and created again.",
		}),
		urlRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "autodiag_notify_url_refusals_total",
			Help: "Rotated sink URLs (url_secret) refused by the outbound URL rules, by sink; the sink keeps its last good URL.",
		}, []string{"sink"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.total, m.dropped, m.pending, m.entries, m.maxLen, m.delay, m.resets, m.urlRefused} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("notify: register metrics: %w", err)
			}
		}
	}
	for _, s := range sinks {
		m.dropped.WithLabelValues(s.Name(), ReasonOutboxFull)
		m.entries.WithLabelValues(s.Name())
		m.urlRefused.WithLabelValues(s.Name())
		for _, r := range []string{ResultDelivered, ResultRetry, ResultDead} {
			for _, e := range EventTypes {
				if s.Wants(e) {
					m.total.WithLabelValues(s.Name(), string(e), r)
				}
			}
		}
	}
	return m, nil
}

func (m *metrics) count(dl Delivery, result string) {
	m.total.WithLabelValues(dl.Sink, string(dl.Event), result).Inc()
}
