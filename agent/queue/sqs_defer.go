package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

const (
	// deferReserve is how many receives under the queue's maxReceiveCount
	// Defer leaves unspent: a message deferred by ChangeVisibility comes
	// back with one more receive, and the reserve is for a run that then
	// fails or a visibility that lapses, not for policy.
	deferReserve = 1
	// maxSQSDelay is SendMessage's largest DelaySeconds.
	maxSQSDelay = 15 * time.Minute
	// copyGuard is how long a message is hidden while a copy of it is sent
	// elsewhere (Defer's re-send, DeadLetter's DLQ copy) and it is deleted:
	// longer than those calls take, retries included.
	copyGuard = 2 * time.Minute
)

// mustResend reports whether deferring a message received count times would
// bring it within deferReserve of maxReceiveCount (0: no redrive policy).
func mustResend(count, maxReceiveCount int) bool {
	return maxReceiveCount > 0 && count+deferReserve >= maxReceiveCount
}

// Defer implements Source. While m's receive count is well below the task
// queue's maxReceiveCount (read from its RedrivePolicy with
// GetQueueAttributes and cached; no policy means never) it is
// ChangeVisibility. Nearer, m is sent again as a new message, delayed by
// min(delay, 15 min) (SQS's DelaySeconds limit; a longer deferral is asked
// again when the message comes back), with its attributes,
// DeferralsAttribute one higher and OriginalIDAttribute, and then the old
// message is deleted; a message whose handle is stale is not re-sent (the
// error is returned). When the task queue's attributes cannot be read it
// re-sends, which is always safe; when the re-send fails it falls back to
// ChangeVisibility. It ends a Hold of m.
func (s *SQS) Defer(ctx context.Context, m *Message, delay time.Duration) error {
	delay = max(delay, 0)
	s.keep.unhold(m)
	a, err := s.taskAttrs.get(ctx, s.c, s.o.Clock.Now())
	if err != nil {
		s.log.Warn("reading the task queue's redrive policy failed; deferring by re-sending", "message_id", m.ID, "err", err)
	} else if !mustResend(m.ReceiveCount, a.maxReceiveCount) {
		return s.ChangeVisibility(ctx, m, delay)
	}
	// Copy only a message this consumer still holds: hiding it fails when
	// the handle is stale (it was received again), and then nothing is
	// sent, so no second copy appears.
	if err := s.ChangeVisibility(ctx, m, copyGuard); err != nil {
		return fmt.Errorf("queue: defer %s: %w", m.ID, err)
	}
	if err := s.resend(ctx, m, delay, a.maxSize); err != nil {
		s.log.Warn("re-sending a deferred message failed; hiding it instead", "message_id", m.ID,
			"receive_count", m.ReceiveCount, "err", err)
		if cerr := s.ChangeVisibility(ctx, m, delay); cerr != nil {
			return fmt.Errorf("queue: defer %s: %w", m.ID, errors.Join(err, cerr))
		}
		return nil
	}
	if err := s.Delete(ctx, m); err != nil {
		return fmt.Errorf("queue: defer %s: re-sent, but the old message stays: %w", m.ID, err)
	}
	return nil
}

// resend sends m's body and attributes to the task queue again as a new
// message, delayed by delay (up to maxSQSDelay).
func (s *SQS) resend(ctx context.Context, m *Message, delay time.Duration, maxSize int) error {
	deferrals, _ := strconv.Atoi(m.Attributes[DeferralsAttribute])
	attrs := map[string]types.MessageAttributeValue{
		DeferralsAttribute:  numberAttr(deferrals + 1),
		OriginalIDAttribute: stringAttr(m.ID),
	}
	names := make([]string, 0, len(m.Attributes))
	for k, v := range m.Attributes {
		if _, ours := attrs[k]; !ours && v != "" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for _, k := range names {
		if len(attrs) == maxSQSAttributes {
			s.log.Warn("re-sent message drops attributes past SQS's 10", "message_id", m.ID, "from", k)
			break
		}
		attrs[k] = stringAttr(m.Attributes[k])
	}
	body := string(m.Body)
	if n := messageSize(body, attrs); n > maxSize {
		return fmt.Errorf("%d bytes with the deferral attributes exceed the queue's MaximumMessageSize %d", n, maxSize)
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(s.o.QueueURL),
		MessageBody:       aws.String(body),
		MessageAttributes: attrs,
		DelaySeconds:      int32(ceilSeconds(min(delay, maxSQSDelay))),
	}
	if m.TraceHeader != "" {
		// The producer's X-Ray header stays with the task (a system
		// attribute, not among the ten).
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(m.TraceHeader)}}
	}
	_, err := s.c.SendMessage(ctx, in)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}
