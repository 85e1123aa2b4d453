package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Queue attributes the source acts on, and what it assumes when it cannot
// read them.
const (
	// defaultMaxMessageSize is SQS's MaximumMessageSize unless a queue
	// raises it (up to 1 MiB); assumed when the attribute cannot be read,
	// because a smaller message always fits a larger limit.
	defaultMaxMessageSize = 262144
	// defaultVisibility is SQS's default VisibilityTimeout.
	defaultVisibility = 30 * time.Second
	// queueAttrsTTL is how long attributes read from a queue are trusted:
	// an operator may raise a limit or change the redrive policy.
	queueAttrsTTL = 5 * time.Minute
	// attrsReadLimit bounds a read that no caller's context bounds.
	attrsReadLimit = 10 * time.Second
)

// queueAttrs is what the source reads of a queue with GetQueueAttributes.
type queueAttrs struct {
	maxSize         int           // MaximumMessageSize, bytes of body plus attributes
	maxReceiveCount int           // of the RedrivePolicy; 0 when the queue has none
	visibility      time.Duration // VisibilityTimeout
}

func defaultQueueAttrs() queueAttrs {
	return queueAttrs{maxSize: defaultMaxMessageSize, visibility: defaultVisibility}
}

// attrCache holds one queue's attributes for queueAttrsTTL.
type attrCache struct {
	url string

	mu   sync.Mutex
	val  queueAttrs
	read time.Time // zero: not read, or invalidated
}

// get returns the queue's attributes, reading them when the cache is empty
// or older than queueAttrsTTL. When a read fails, it returns the last
// attributes read if any (with a nil error), else the SQS defaults and
// the error.
func (c *attrCache) get(ctx context.Context, api SQSAPI, now time.Time) (queueAttrs, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read.IsZero() && now.Sub(c.read) < queueAttrsTTL {
		return c.val, nil
	}
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(c.url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameMaximumMessageSize,
			types.QueueAttributeNameRedrivePolicy,
			types.QueueAttributeNameVisibilityTimeout,
		},
	})
	if err == nil {
		var a queueAttrs
		if a, err = parseQueueAttrs(out.Attributes); err == nil {
			c.val, c.read = a, now
			return a, nil
		}
	}
	err = fmt.Errorf("queue: get attributes of %s: %w", c.url, err)
	if c.val != (queueAttrs{}) {
		return c.val, nil
	}
	return defaultQueueAttrs(), err
}

// invalidate makes the next get read the queue again.
func (c *attrCache) invalidate() {
	c.mu.Lock()
	c.read = time.Time{}
	c.mu.Unlock()
}

func parseQueueAttrs(m map[string]string) (queueAttrs, error) {
	a := defaultQueueAttrs()
	if v, ok := m[string(types.QueueAttributeNameMaximumMessageSize)]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return a, fmt.Errorf("MaximumMessageSize %q is not a size", v)
		}
		a.maxSize = n
	}
	if v, ok := m[string(types.QueueAttributeNameVisibilityTimeout)]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return a, fmt.Errorf("VisibilityTimeout %q is not a number of seconds", v)
		}
		a.visibility = time.Duration(n) * time.Second
	}
	if v := m[string(types.QueueAttributeNameRedrivePolicy)]; v != "" {
		var rp map[string]json.RawMessage
		if err := json.Unmarshal([]byte(v), &rp); err != nil {
			return a, fmt.Errorf("RedrivePolicy: %w", err)
		}
		// SQS writes maxReceiveCount as a number; policies set through
		// some tools carry it as a string.
		n, err := strconv.Atoi(strings.Trim(string(rp["maxReceiveCount"]), `"`))
		if err != nil || n < 1 {
			return a, fmt.Errorf("RedrivePolicy: maxReceiveCount %s is not a count", rp["maxReceiveCount"])
		}
		a.maxReceiveCount = n
	}
	return a, nil
}

// messageSize is a message's size as SQS counts it against
// MaximumMessageSize: the body's bytes plus, for each attribute, the bytes
// of its name, data type and value.
func messageSize(body string, attrs map[string]types.MessageAttributeValue) int {
	n := len(body)
	for k, v := range attrs {
		n += attrSize(k, v)
	}
	return n
}

func attrSize(name string, v types.MessageAttributeValue) int {
	return len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
}

func stringAttr(v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
}

func numberAttr(n int) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(n))}
}
