// Package clock is the one Clock the agent's parts take, so that a test
// injects one fake for all of them. It imports nothing of autodiag.
package clock

import "time"

// Clock tells the time; tests inject a fake one.
type Clock interface{ Now() time.Time }

// Wall is the real time.
type Wall struct{}

// Now is time.Now.
func (Wall) Now() time.Time { return time.Now() }
