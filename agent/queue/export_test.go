package queue

// Bounds the tests check against.
const (
	DeadLetterAttempts = deadLetterAttempts
	DeferReserve       = deferReserve
)
