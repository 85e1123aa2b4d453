package main

import (
	"fmt"
	"io"

	"github.com/autodiag/autodiag/internal/harness"
)

// noticeRes is what the shared lifecycle queue cost per notice: each
// notice is ideally received once, by whichever agent, and handed to its
// instance's agent through Redis (handoff:<instance>).
type noticeRes struct {
	Notices           int     `json:"notices"`             // sent to the lifecycle queue
	Deliveries        int     `json:"deliveries"`          // messages received (one received twice counts twice)
	ReceiveCalls      int     `json:"receive_calls"`       // ReceiveMessage calls that returned a notice
	ReceivesPerNotice float64 `json:"receives_per_notice"` // deliveries / notices
}

// readNotices counts the lifecycle queue's notices and their deliveries.
func readNotices(l *harness.Lab, queue string) *noticeRes {
	_, _, _, st, ok := l.SQS.Stats(queue)
	if !ok {
		return nil
	}
	n := &noticeRes{Notices: st.Sent, Deliveries: st.Received}
	for _, c := range l.SQS.Calls("ReceiveMessage") {
		if c.Queue == queue && c.N > 0 {
			n.ReceiveCalls++
		}
	}
	if n.Notices > 0 {
		n.ReceivesPerNotice = float64(n.Deliveries) / float64(n.Notices)
	}
	return n
}

func (n *noticeRes) print(w io.Writer) {
	fmt.Fprintf(w, "\nLifecycle queue: %d notices, %d deliveries (%.2f receives per notice), %d ReceiveMessage calls that returned one.\n",
		n.Notices, n.Deliveries, n.ReceivesPerNotice, n.ReceiveCalls)
}
