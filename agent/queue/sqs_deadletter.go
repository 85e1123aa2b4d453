package queue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/autodiag/autodiag/agent/internal/utf8cut"
)

// Bounds of DeadLetter.
const (
	// deadLetterAttempts bounds the SendMessage calls of one DeadLetter,
	// each already retried by the SDK for throttling and 5xx: past them
	// the message is left to come back and be dead-lettered again.
	deadLetterAttempts = 4
	// deadLetterBackoff is the pause before the second attempt, doubling
	// up to deadLetterMaxBackoff: about 1.4 s of pauses in all.
	deadLetterBackoff    = 200 * time.Millisecond
	deadLetterMaxBackoff = time.Second
	// maxReasonBytes bounds the reject reason so that, with the body cut
	// to fit, a DLQ copy fits even SQS's smallest MaximumMessageSize.
	maxReasonBytes = 512
)

// DeadLetter implements Source: the original body goes to the DLQ with the
// reason in RejectReasonAttribute and the original string attributes (as
// many as fit in SQS's 10, by name), then the message is deleted here.
//
// The copy always fits the DLQ's MaximumMessageSize (read with
// GetQueueAttributes and cached): when body and attributes exceed it, the
// copied attributes go first, largest first; then the body is cut (on a
// UTF-8 boundary) and TruncatedAttribute records its original size. A send
// that fails anyway is retried deadLetterAttempts times with backoff,
// reading the DLQ's limit again, before DeadLetter returns the error with m
// still in the source. A message whose handle is stale (received again
// since) is not copied: the error is returned.
func (s *SQS) DeadLetter(ctx context.Context, m *Message, reason string) error {
	if s.o.DLQURL == "" {
		return ErrNoDeadLetter
	}
	s.keep.unhold(m)
	defer s.forget(m.Handle)
	// As in Defer: a consumer whose handle is stale sends no copy.
	if err := s.ChangeVisibility(ctx, m, copyGuard); err != nil {
		return fmt.Errorf("queue: dead-letter %s: %w", m.ID, err)
	}
	var err error
	pause := deadLetterBackoff
	for attempt := range deadLetterAttempts {
		if attempt > 0 {
			if !sleepCtx(ctx, pause) {
				break
			}
			pause = min(2*pause, deadLetterMaxBackoff)
		}
		a, aerr := s.dlqAttrs.get(ctx, s.c, s.o.Clock.Now())
		if aerr != nil {
			s.log.Warn("reading the dead-letter queue's size limit failed; assuming SQS's default", "size", a.maxSize, "err", aerr)
		}
		body, attrs := fitDeadLetter(m, reason, a.maxSize)
		_, err = s.c.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl:          aws.String(s.o.DLQURL),
			MessageBody:       aws.String(body),
			MessageAttributes: attrs,
		})
		if err == nil {
			break
		}
		// The DLQ's limit may have been lowered since it was read.
		s.dlqAttrs.invalidate()
		s.log.Warn("dead-letter send failed", "message_id", m.ID, "attempt", attempt+1, "err", err)
	}
	if err != nil {
		return fmt.Errorf("queue: dead-letter %s: %w", m.ID, err)
	}
	if err := s.Delete(ctx, m); err != nil {
		return fmt.Errorf("queue: dead-letter %s: sent, but: %w", m.ID, err)
	}
	return nil
}

// fitDeadLetter is the body and attributes of m's DLQ copy, within limit
// bytes as SQS counts them.
func fitDeadLetter(m *Message, reason string, limit int) (string, map[string]types.MessageAttributeValue) {
	if reason == "" {
		reason = "unspecified"
	}
	attrs := map[string]types.MessageAttributeValue{RejectReasonAttribute: stringAttr(utf8cut.Head(reason, maxReasonBytes))}
	names := make([]string, 0, len(m.Attributes))
	for k, v := range m.Attributes {
		if k != RejectReasonAttribute && k != TruncatedAttribute && v != "" {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var copied []string
	for _, k := range names {
		if len(attrs) == maxSQSAttributes {
			break
		}
		attrs[k] = stringAttr(m.Attributes[k])
		copied = append(copied, k)
	}
	body := string(m.Body)
	size := messageSize(body, attrs)
	if size <= limit {
		return body, attrs
	}
	// Drop copied attributes, largest first, while the copy is too big.
	slices.SortStableFunc(copied, func(a, b string) int {
		return cmp.Compare(attrSize(b, attrs[b]), attrSize(a, attrs[a]))
	})
	for _, k := range copied {
		if size <= limit {
			return body, attrs
		}
		size -= attrSize(k, attrs[k])
		delete(attrs, k)
	}
	if size <= limit {
		return body, attrs
	}
	attrs[TruncatedAttribute] = numberAttr(len(body))
	room := limit - messageSize("", attrs)
	return utf8cut.Head(body, max(room, 1)), attrs
}

// sleepCtx waits d or until ctx ends, reporting whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
