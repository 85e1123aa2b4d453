package cwfake

import "github.com/autodiag/autodiag/internal/fake/fakefault"

// FaultKind says how an injected fault answers a request.
type FaultKind int

const (
	// FaultThrottle answers 400 Throttling ("Rate exceeded"), which the
	// SDK's standard retryer retries as a throttle.
	FaultThrottle FaultKind = iota + 1
	// FaultServerError answers 500 InternalServiceError
	// (*types.InternalServiceFault in the SDK).
	FaultServerError
	// FaultUnavailable answers 503 ServiceUnavailable.
	FaultUnavailable
)

func (k FaultKind) String() string {
	switch k {
	case FaultThrottle:
		return "throttle"
	case FaultServerError:
		return "server-error"
	case FaultUnavailable:
		return "unavailable"
	}
	return ""
}

// Fault describes PutMetricData requests to fail. A faulted request is
// answered before it is decoded, so nothing of it is recorded, as with a
// throttled or failed call to CloudWatch.
type Fault struct {
	Kind FaultKind
	// Count limits how many requests are hit; 0 means unlimited.
	Count int
	// Skip lets this many requests through before the fault arms.
	Skip int
	// Probability that a request is hit, in (0,1]; 0 means always. Draws
	// come from the server's random source (see WithSeed).
	Probability float64
}

// InjectFault arms a fault and returns its id for RemoveFault and
// FaultFired. Faults are checked in the order they were added; the first
// that fires answers the request.
func (s *Server) InjectFault(f Fault) int {
	return s.faults.Add(f, fakefault.Gate{Count: f.Count, Skip: f.Skip, Probability: f.Probability})
}

// ThrottleNext makes the next n requests fail with Throttling.
func (s *Server) ThrottleNext(n int) int { return s.InjectFault(Fault{Kind: FaultThrottle, Count: n}) }

// FailNext makes the next n requests fail with 500 InternalServiceError.
func (s *Server) FailNext(n int) int { return s.InjectFault(Fault{Kind: FaultServerError, Count: n}) }

// RemoveFault disarms the fault with the given id.
func (s *Server) RemoveFault(id int) { s.faults.Remove(id) }

// ClearFaults disarms every fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// FaultFired reports how many requests the fault with the given id hit
// (0 once it is removed).
func (s *Server) FaultFired(id int) int { return s.faults.Fired(id) }

// pickFault returns the error of the first armed fault that hits the
// request, and notes its kind in call.
func (s *Server) pickFault(call *Call) *apiError {
	var err *apiError
	s.faults.Scan(func(a *fakefault.Armed[Fault], hit func() bool) {
		f := a.Fault
		if err != nil || f.Kind < FaultThrottle || f.Kind > FaultUnavailable || !hit() {
			return
		}
		call.Fault = f.Kind
		switch f.Kind {
		case FaultThrottle:
			err = errThrottling()
		case FaultServerError:
			err = errInternal()
		case FaultUnavailable:
			err = errUnavailable()
		}
	})
	return err
}
