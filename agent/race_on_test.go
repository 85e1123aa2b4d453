//go:build race

package agent

// raceEnabled: the race detector changes what allocates, so allocation
// bounds are checked without it.
const raceEnabled = true
