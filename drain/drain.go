package drain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/autodiag/autodiag/internal/clock"
	"github.com/autodiag/autodiag/internal/configerr"
)

// State is where a Controller is in its life.
type State int32

// The states, in the only order they can happen.
const (
	Running State = iota
	Draining
	Drained
)

func (s State) String() string {
	switch s {
	case Running:
		return "running"
	case Draining:
		return "draining"
	case Drained:
		return "drained"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// Queued policies: what happens to work received but not started when a
// drain begins.
const (
	QueuedFinish  = "finish"  // run it before the drain ends (default)
	QueuedRelease = "release" // hand it back to the queue at once
)

// Defaults of a drain.
const (
	DefaultTimeout = 10 * time.Minute
	DefaultQueued  = QueuedFinish
)

// Config bounds a drain. Its yaml keys are those of the configuration
// file's lifecycle section (lifecycle.drain_timeout, lifecycle.queued),
// where the agent inlines it beside the lifecycle package's settings.
type Config struct {
	// Timeout bounds the whole drain from its trigger; at the deadline
	// unstarted work is released and running work cancelled. Zero means
	// DefaultTimeout.
	Timeout time.Duration `yaml:"drain_timeout"`
	// Queued is QueuedFinish (default, also for "") or QueuedRelease.
	Queued string `yaml:"queued"`
	// CancelGrace bounds how long Wait waits, after cancelling running work
	// at the deadline, for it to report Done. Zero means 30s. Not a
	// configuration key (deploy/nesting_test.go reads the default from New).
	CancelGrace time.Duration `yaml:"-"`
}

// DefaultConfig is the drain a configuration file that leaves the keys out
// gets.
func DefaultConfig() Config {
	return Config{Timeout: DefaultTimeout, Queued: DefaultQueued}
}

// Validate reports every problem of a loaded configuration at once, each a
// *configerr.Error naming its key. Unlike New, which fills in zero values,
// it takes a zero timeout or an empty queued policy as written in the file
// and rejects them.
func (c Config) Validate() error {
	var errs []error
	if c.Timeout <= 0 {
		errs = append(errs, configerr.Errorf("drain_timeout", "must be positive, got %s", c.Timeout))
	}
	switch c.Queued {
	case QueuedFinish, QueuedRelease:
	default:
		errs = append(errs, configerr.Errorf("queued", "must be %s or %s, got %q", QueuedFinish, QueuedRelease, c.Queued))
	}
	return errors.Join(errs...)
}

// Trigger is what started a drain.
type Trigger struct {
	Source string // signal, admin, imds, spot, sqs, restart
	Reason string
	// Deadline, when set and earlier than now+Timeout, is the hard end of
	// the drain (a spot interruption's action time, a persisted deadline).
	Deadline time.Time
}

// Progress is a snapshot for status endpoints and metrics.
type Progress struct {
	State     State
	Source    string
	Reason    string
	StartedAt time.Time
	Deadline  time.Time
	Queued    int // received, not started
	Running   int
	Released  int // handed back during the drain: unstarted by the drain, started by its worker (Item.HandedBack)
	Cancelled int // running work cancelled at the deadline
	TimedOut  bool
	EndedAt   time.Time // when the last work ended (zero while some remains)
}

// Remaining is the work the drain still waits for.
func (p Progress) Remaining() int { return p.Queued + p.Running }

// Option configures a Controller beyond its Config.
type Option func(*Controller)

// WithClock makes the Controller read time from clk instead of the wall
// clock (a fake clock in tests, the agent's injected one in production).
func WithClock(clk clock.Waiter) Option {
	return func(c *Controller) {
		if clk != nil {
			c.clock = clk
		}
	}
}

// Controller is the drain state machine of one agent. The zero value is not
// usable; call New.
type Controller struct {
	cfg   Config
	clock clock.Waiter

	mu        sync.Mutex
	state     State
	trigger   Trigger
	startedAt time.Time
	deadline  time.Time
	timedOut  bool
	endedAt   time.Time
	items     map[*Item]struct{}
	holds     int // see Hold
	released  int
	cancelled int
	draining  chan struct{} // closed when the drain starts
	changed   chan struct{} // closed and replaced on every item change
}

// New returns a running Controller.
func New(cfg Config, opts ...Option) *Controller {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Queued == "" {
		cfg.Queued = DefaultQueued
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = 30 * time.Second
	}
	c := &Controller{
		cfg:      cfg,
		clock:    clock.Wall{},
		items:    map[*Item]struct{}{},
		draining: make(chan struct{}),
		changed:  make(chan struct{}),
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Item is one received unit of work tracked by the drain.
type Item struct {
	c       *Controller
	release func()
	cancel  context.CancelFunc
	started bool
	gone    bool // released by the drain, or done
	// handedBack: its worker gave it back to the queue (a run cancelled
	// by a fast exit or the deadline); Done counts it as released.
	handedBack bool
}

// Track registers received work. release hands it back to the queue; the
// drain calls it (once, from its own goroutine) if the work has not started
// when the policy or the deadline says so. Work received at the same
// instant a drain starts is still tracked: received work is never lost.
func (c *Controller) Track(release func()) *Item {
	it := &Item{c: c, release: release}
	c.mu.Lock()
	releaseNow := c.state == Draining && (c.cfg.Queued == QueuedRelease || c.timedOut)
	if releaseNow {
		it.gone = true
		c.released++
	} else {
		c.items[it] = struct{}{}
		c.notifyLocked()
	}
	c.mu.Unlock()
	if releaseNow {
		c.releaseItems([]*Item{it})
	}
	return it
}

// Start marks the item running with cancel as the way to stop it. It
// returns false when the drain has released the item: the caller must not
// run it (its release already happened).
func (it *Item) Start(cancel context.CancelFunc) bool {
	c := it.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if it.gone {
		return false
	}
	it.started, it.cancel = true, cancel
	c.notifyLocked()
	if c.timedOut && cancel != nil {
		c.cancelled++
		cancel()
	}
	return true
}

// HandedBack marks started work that its worker gave back to the queue
// instead of finishing it (a run cancelled by a fast exit or the drain
// deadline): Done then counts it in Progress.Released during a drain, as
// the work the drain released itself is, so the drain's count agrees
// with the tasks' released outcomes.
func (it *Item) HandedBack() {
	c := it.c
	c.mu.Lock()
	defer c.mu.Unlock()
	it.handedBack = true
}

// Done removes the item; call it once the work's outcome is recorded.
func (it *Item) Done() {
	c := it.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[it]; !ok {
		return
	}
	if it.handedBack && c.state != Running {
		c.released++
	}
	it.gone = true
	delete(c.items, it)
	c.markEndedLocked()
	c.notifyLocked()
}

// Hold keeps a drain from ending without being work itself: intake holds
// the controller while a receive may still hand it messages (a poll
// answered as the drain began), so that work tracked a moment after Start
// is still waited for. The returned func lets go; calling it again does
// nothing. Holds are neither queued nor running in Progress.
func (c *Controller) Hold() (release func()) {
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
	return sync.OnceFunc(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.holds--
		c.markEndedLocked()
		c.notifyLocked()
	})
}

// idleLocked reports that nothing keeps a drain from ending.
func (c *Controller) idleLocked() bool { return len(c.items) == 0 && c.holds == 0 }

// markEndedLocked records when a drain's last work ended.
func (c *Controller) markEndedLocked() {
	if c.state == Draining && c.idleLocked() && c.endedAt.IsZero() {
		c.endedAt = c.clock.Now()
	}
}

func (c *Controller) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Start begins the drain; only the first call has an effect and returns
// true. Intake must stop when Draining() is closed, which happens here,
// before Start returns.
func (c *Controller) Start(tr Trigger) bool {
	c.mu.Lock()
	if c.state != Running {
		c.mu.Unlock()
		return false
	}
	now := c.clock.Now()
	c.state = Draining
	c.trigger = tr
	c.startedAt = now
	c.deadline = now.Add(c.cfg.Timeout)
	if !tr.Deadline.IsZero() && tr.Deadline.Before(c.deadline) {
		c.deadline = tr.Deadline
	}
	if c.idleLocked() {
		c.endedAt = now
	}
	close(c.draining)
	var unstarted []*Item
	if c.cfg.Queued == QueuedRelease {
		unstarted = c.unstartedLocked()
	}
	c.notifyLocked()
	c.mu.Unlock()
	c.releaseItems(unstarted)
	return true
}

// unstartedLocked marks unstarted items gone and returns them.
func (c *Controller) unstartedLocked() []*Item {
	var out []*Item
	for it := range c.items {
		if !it.started && !it.gone {
			it.gone = true
			delete(c.items, it)
			out = append(out, it)
		}
	}
	c.released += len(out)
	c.markEndedLocked()
	return out
}

func (c *Controller) releaseItems(items []*Item) {
	for _, it := range items {
		if it.release != nil {
			it.release()
		}
	}
}

// Draining is closed at the first instant of a drain.
func (c *Controller) Draining() <-chan struct{} { return c.draining }

// State reports the current state.
func (c *Controller) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// ErrTimedOut is returned by Wait when the drain reached its deadline with
// work remaining; that work was released or cancelled.
var ErrTimedOut = errors.New("drain: deadline reached with work remaining")

// Wait blocks until a drain has started, all tracked work is done and no
// Hold is held. At the drain deadline it releases unstarted work, cancels
// running work and waits up to CancelGrace for it to report Done; it then
// returns ErrTimedOut. It returns ctx.Err() if ctx ends first.
func (c *Controller) Wait(ctx context.Context) error {
	select {
	case <-c.draining:
	case <-ctx.Done():
		return ctx.Err()
	}
	c.mu.Lock()
	deadline := c.deadline
	c.mu.Unlock()
	expired := c.clock.After(deadline.Sub(c.clock.Now()))
	for {
		c.mu.Lock()
		if c.idleLocked() {
			timedOut := c.timedOut
			c.mu.Unlock()
			if timedOut {
				return ErrTimedOut
			}
			return nil
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-expired:
			c.expire()
			if err := c.waitGrace(ctx, c.clock.After(c.cfg.CancelGrace)); err != nil {
				return err
			}
			return ErrTimedOut
		}
	}
}

// expire releases unstarted work and cancels running work.
func (c *Controller) expire() {
	c.mu.Lock()
	c.timedOut = true
	unstarted := c.unstartedLocked()
	var cancels []context.CancelFunc
	for it := range c.items {
		if it.started && it.cancel != nil {
			cancels = append(cancels, it.cancel)
		}
	}
	c.cancelled += len(cancels)
	c.notifyLocked()
	c.mu.Unlock()
	c.releaseItems(unstarted)
	for _, cancel := range cancels {
		cancel()
	}
}

// waitGrace waits for cancelled work to report Done, up to grace.
func (c *Controller) waitGrace(ctx context.Context, grace <-chan time.Time) error {
	for {
		c.mu.Lock()
		idle := c.idleLocked()
		changed := c.changed
		c.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-grace:
			return nil
		}
	}
}

// Finish moves a draining controller to Drained (after the lifecycle
// action is completed). It reports whether the state changed.
func (c *Controller) Finish() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != Draining {
		return false
	}
	c.state = Drained
	c.notifyLocked()
	return true
}

// Progress returns a snapshot.
func (c *Controller) Progress() Progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := Progress{
		State:     c.state,
		Source:    c.trigger.Source,
		Reason:    c.trigger.Reason,
		StartedAt: c.startedAt,
		Deadline:  c.deadline,
		Released:  c.released,
		Cancelled: c.cancelled,
		TimedOut:  c.timedOut,
		EndedAt:   c.endedAt,
	}
	for it := range c.items {
		if it.started {
			p.Running++
		} else {
			p.Queued++
		}
	}
	return p
}
