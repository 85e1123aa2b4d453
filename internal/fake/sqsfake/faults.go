package sqsfake

import (
	"context"
	"strings"
	"time"

	"github.com/autodiag/autodiag/internal/fake/fakefault"
)

// FaultKind says what an injected fault does to a matching request.
type FaultKind int

const (
	// FaultThrottle answers with a throttling error before the operation
	// runs (HTTP 400, ThrottlingException by default; see Fault.Code). The
	// SDK's standard retryer treats it as a retryable throttle.
	FaultThrottle FaultKind = iota + 1
	// FaultServerError answers 500 InternalError before the operation runs.
	FaultServerError
	// FaultLatency delays the request by Fault.Latency (on the server's
	// Clock), then runs it normally.
	FaultLatency
	// FaultDropResponse runs the operation, then closes the connection
	// without a response (TCP RST): the change IS applied but the client
	// sees a connection error and, with the SDK retryer, tries again.
	FaultDropResponse
	// FaultServerErrorAfterApply runs the operation, then answers 500
	// InternalError: applied, yet reported as failed.
	FaultServerErrorAfterApply
	// FaultBatchEntryError fails single entries of the batch operations
	// (SendMessageBatch, DeleteMessageBatch, ChangeMessageVisibilityBatch):
	// the entry is not applied and is reported in Failed with Code
	// InternalError and SenderFault false, while the request succeeds.
	// Probability, Count and Skip count entries, not requests.
	FaultBatchEntryError
	// FaultDuplicateDelivery makes a ReceiveMessage deliver its messages and
	// leave them visible, so the next receive delivers them again (with a new
	// receipt handle; the first becomes stale) — the at-least-once duplicate
	// delivery of standard queues, on demand. Count counts ReceiveMessage
	// requests, including ones that return no message.
	FaultDuplicateDelivery
)

func (k FaultKind) String() string {
	switch k {
	case FaultThrottle:
		return "throttle"
	case FaultServerError:
		return "server-error"
	case FaultLatency:
		return "latency"
	case FaultDropResponse:
		return "drop-response"
	case FaultServerErrorAfterApply:
		return "server-error-after-apply"
	case FaultBatchEntryError:
		return "batch-entry-error"
	case FaultDuplicateDelivery:
		return "duplicate-delivery"
	}
	return ""
}

// Fault describes requests to disturb. Zero fields match everything.
type Fault struct {
	Op    string // operation name such as "ReceiveMessage"; "" = every operation
	Queue string // queue name; "" = every queue
	Kind  FaultKind
	// Probability that a matching request is hit, in (0,1]; 0 means always.
	// Draws come from the server's random source (see WithSeed).
	Probability float64
	// Count limits how many requests are hit; 0 means unlimited.
	Count int
	// Skip lets this many matching requests through before the fault arms.
	Skip int
	// Latency is the delay for FaultLatency.
	Latency time.Duration
	// Code overrides the throttling error code: "ThrottlingException"
	// (default, the generic AWS throttle) or "RequestThrottled" (the modeled
	// SQS error, *types.RequestThrottled in the SDK).
	Code string
}

// InjectFault adds a fault and returns its id for RemoveFault and
// FaultFired. Faults are checked in the order they were added; latency faults
// add up, and the first other fault that fires decides the request.
func (s *Server) InjectFault(f Fault) int {
	return s.faults.Add(f, fakefault.Gate{Count: f.Count, Skip: f.Skip, Probability: f.Probability})
}

// RemoveFault disarms the fault with the given id.
func (s *Server) RemoveFault(id int) { s.faults.Remove(id) }

// ClearFaults disarms every fault.
func (s *Server) ClearFaults() { s.faults.Clear() }

// FaultFired reports how many requests the fault with the given id hit.
func (s *Server) FaultFired(id int) int { return s.faults.Fired(id) }

type faultAction struct {
	err       *apiError               // answer this instead of running the operation
	after     FaultKind               // FaultDropResponse or FaultServerErrorAfterApply
	entry     *fakefault.Armed[Fault] // FaultBatchEntryError: decides per entry
	duplicate bool                    // FaultDuplicateDelivery
}

func terminal(k FaultKind) bool {
	switch k {
	case FaultThrottle, FaultServerError, FaultDropResponse, FaultServerErrorAfterApply:
		return true
	}
	return false
}

// entryFails decides, for one batch entry, whether an armed
// FaultBatchEntryError fails it.
func (s *Server) entryFails(a *fakefault.Armed[Fault], call *Call) bool {
	if a == nil || !s.faults.Hit(a) {
		return false
	}
	if len(call.Faults) == 0 || call.Faults[len(call.Faults)-1] != FaultBatchEntryError {
		call.Faults = append(call.Faults, FaultBatchEntryError)
	}
	return true
}

func errEntryInternal() *apiError {
	return &apiError{status: 500, typ: "InternalError", query: "InternalError", msg: "We encountered an internal error. Please try again."}
}

func (s *Server) pickFault(ctx context.Context, call *Call) faultAction {
	var delay time.Duration
	var act faultAction
	s.faults.Scan(func(a *fakefault.Armed[Fault], hit func() bool) {
		f := a.Fault
		if f.Op != "" && f.Op != call.Op || f.Queue != "" && f.Queue != call.Queue {
			return
		}
		if a.Spent() {
			return
		}
		if terminal(f.Kind) && (act.err != nil || act.after != 0) {
			return
		}
		if f.Kind == FaultBatchEntryError {
			if act.entry == nil && strings.HasSuffix(call.Op, "Batch") {
				act.entry = a
			}
			return
		}
		if f.Kind == FaultDuplicateDelivery && call.Op != "ReceiveMessage" {
			return
		}
		if !hit() {
			return
		}
		call.Faults = append(call.Faults, f.Kind)
		switch f.Kind {
		case FaultLatency:
			delay += f.Latency
		case FaultThrottle:
			act.err = errThrottled(f.Code)
		case FaultServerError:
			act.err = errInternal()
		case FaultDropResponse, FaultServerErrorAfterApply:
			act.after = f.Kind
		case FaultDuplicateDelivery:
			act.duplicate = true
		}
	})
	if delay > 0 {
		t := s.clock.NewTimer(delay)
		select {
		case <-t.C():
		case <-ctx.Done():
		case <-s.closed:
		}
		t.Stop()
	}
	return act
}
