package harness

import "time"

// FastClock is a clock for a fake (the Auto Scaling fake's Now) that starts
// at the wall clock's time and runs Scale times faster, so that a timeout
// AWS will not let be shorter than 30 s expires within a scene: with Scale
// 10, 30 s of the fake's time is 3 s of the wall clock.
type FastClock struct {
	Base  time.Time
	Scale float64
}

// NewFastClock starts a FastClock now; scale below 1 is 1.
func NewFastClock(scale float64) FastClock {
	return FastClock{Base: time.Now(), Scale: max(scale, 1)}
}

// Now is the fake's time.
func (c FastClock) Now() time.Time {
	return c.Base.Add(time.Duration(float64(time.Since(c.Base)) * c.Scale))
}

// Real is the wall-clock time of t, a time of the fake's.
func (c FastClock) Real(t time.Time) time.Time {
	return c.Base.Add(time.Duration(float64(t.Sub(c.Base)) / c.Scale))
}

// RealDuration is d of the fake's time in wall-clock time.
func (c FastClock) RealDuration(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.Scale)
}
