package queue

// Bounds the tests check against.
const (
	DeadLetterAttempts = deadLetterAttempts
	DeferReserve       = deferReserve
)

// DeletesInFlight reports the DeleteMessageBatch calls whose goroutine has
// not finished: a Delete returns when its entry's result is delivered,
// which comes before its batch's goroutine records the return.
func (s *SQS) DeletesInFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sending
}
