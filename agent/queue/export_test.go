package queue

// SetGraceDecided replaces the hook Receive calls when a cancelled poll's
// grace ends; the returned func restores it. Tests using it must not run
// in parallel.
func SetGraceDecided(f func(answering bool)) (restore func()) {
	old := graceDecided
	graceDecided = f
	return func() { graceDecided = old }
}
