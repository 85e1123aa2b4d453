package sqsfake

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

type intRange struct{ min, max int }

var intAttrRanges = map[string]intRange{
	"DelaySeconds":                  {0, 900},
	"MaximumMessageSize":            {1024, 1048576},
	"MessageRetentionPeriod":        {60, 1209600},
	"ReceiveMessageWaitTimeSeconds": {0, 20},
	"VisibilityTimeout":             {0, 43200},
}

// Attributes stored verbatim: accepted so infrastructure code can set them,
// without behaviour in the fake.
var opaqueAttrs = map[string]bool{
	"Policy": true, "RedriveAllowPolicy": true, "KmsMasterKeyId": true,
	"KmsDataKeyReusePeriodSeconds": true, "SqsManagedSseEnabled": true,
}

var readOnlyAttrs = []string{
	"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
	"ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn",
}

func defaultQueueAttrs() queueAttrs {
	return queueAttrs{
		delay: 0, maxSize: 262144, retention: 345600, wait: 0, visibility: 30,
		other: map[string]string{"SqsManagedSseEnabled": "true"},
	}
}

func (a queueAttrs) clone() queueAttrs {
	c := a
	c.other = make(map[string]string, len(a.other))
	for k, v := range a.other {
		c.other[k] = v
	}
	return c
}

func (a *queueAttrs) intField(name string) *int {
	switch name {
	case "DelaySeconds":
		return &a.delay
	case "MaximumMessageSize":
		return &a.maxSize
	case "MessageRetentionPeriod":
		return &a.retention
	case "ReceiveMessageWaitTimeSeconds":
		return &a.wait
	case "VisibilityTimeout":
		return &a.visibility
	}
	return nil
}

// applyAttrsLocked validates in and applies it to a copy of cur.
func (s *Server) applyAttrsLocked(cur queueAttrs, in map[string]string, self string) (queueAttrs, *apiError) {
	a := cur.clone()
	for _, name := range sortedKeys(in) {
		v := in[name]
		if r, ok := intAttrRanges[name]; ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < r.min || n > r.max {
				return cur, errInvalidAttributeValue("Invalid value for the parameter %s.", name)
			}
			*a.intField(name) = n
			continue
		}
		switch {
		case name == "RedrivePolicy":
			if v == "" {
				a.redrive, a.redriveRaw = nil, ""
				continue
			}
			rp, aerr := s.parseRedriveLocked(v, self)
			if aerr != nil {
				return cur, aerr
			}
			a.redrive = rp
			b, _ := json.Marshal(map[string]any{"deadLetterTargetArn": rp.DeadLetterTargetArn, "maxReceiveCount": rp.MaxReceiveCount})
			a.redriveRaw = string(b)
		case name == "FifoQueue":
			if v != "false" {
				return cur, errUnsupported("FIFO queues")
			}
		case opaqueAttrs[name]:
			a.other[name] = v
		default:
			return cur, errInvalidAttributeName(name)
		}
	}
	return a, nil
}

func (s *Server) parseRedriveLocked(v, self string) (*redrivePolicy, *apiError) {
	bad := func(reason string) *apiError {
		return errInvalidAttributeValue("Value %s for parameter RedrivePolicy is invalid. Reason: %s.", v, reason)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, bad("Redrive policy is not a valid JSON map")
	}
	var rp redrivePolicy
	if err := json.Unmarshal(raw["deadLetterTargetArn"], &rp.DeadLetterTargetArn); err != nil || rp.DeadLetterTargetArn == "" {
		return nil, bad("Redrive policy does not contain mandatory attribute: deadLetterTargetArn")
	}
	mrc := strings.Trim(string(raw["maxReceiveCount"]), `"`)
	n, err := strconv.Atoi(mrc)
	if err != nil {
		return nil, bad("Redrive policy does not contain mandatory attribute: maxReceiveCount")
	}
	if n < 1 || n > 1000 {
		return nil, bad("Invalid value for maxReceiveCount: " + mrc + ", valid values are from 1 to 1000 both inclusive")
	}
	rp.MaxReceiveCount = n
	if rp.DeadLetterTargetArn == s.QueueARN(self) {
		return nil, bad("Dead-letter target can not be the queue itself")
	}
	if s.queueByARNLocked(rp.DeadLetterTargetArn) == nil {
		return nil, bad("Dead letter target does not exist")
	}
	return &rp, nil
}

func (s *Server) queueByARNLocked(arn string) *queue {
	prefix := "arn:aws:sqs:" + s.region + ":" + s.account + ":"
	name, ok := strings.CutPrefix(arn, prefix)
	if !ok {
		return nil
	}
	return s.queues[name]
}

// attrLocked returns the value GetQueueAttributes reports for name.
func (s *Server) attrLocked(q *queue, name string) (string, bool) {
	if p := q.attrs.intField(name); p != nil {
		return strconv.Itoa(*p), true
	}
	switch name {
	case "ApproximateNumberOfMessages":
		return strconv.Itoa(q.nVisible), true
	case "ApproximateNumberOfMessagesNotVisible":
		return strconv.Itoa(q.nInflight), true
	case "ApproximateNumberOfMessagesDelayed":
		return strconv.Itoa(q.nDelayed), true
	case "CreatedTimestamp":
		return strconv.FormatInt(q.created.Unix(), 10), true
	case "LastModifiedTimestamp":
		return strconv.FormatInt(q.modified.Unix(), 10), true
	case "QueueArn":
		return q.arn, true
	case "RedrivePolicy":
		return q.attrs.redriveRaw, q.attrs.redrive != nil
	}
	v, ok := q.attrs.other[name]
	return v, ok
}

func (s *Server) allAttrNamesLocked(q *queue) []string {
	names := append([]string{}, readOnlyAttrs...)
	for n := range intAttrRanges {
		names = append(names, n)
	}
	if q.attrs.redrive != nil {
		names = append(names, "RedrivePolicy")
	}
	for n := range q.attrs.other {
		names = append(names, n)
	}
	return names
}

func knownQueueAttr(name string) bool {
	if _, ok := intAttrRanges[name]; ok || opaqueAttrs[name] || name == "RedrivePolicy" || name == "All" {
		return true
	}
	for _, n := range readOnlyAttrs {
		if n == name {
			return true
		}
	}
	return false
}

func validQueueName(name string) bool {
	if len(name) < 1 || len(name) > 80 {
		return false
	}
	for _, c := range name {
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// createQueueLocked implements CreateQueue.
func (s *Server) createQueueLocked(name string, attrs map[string]string) (*queue, *apiError) {
	if strings.HasSuffix(name, ".fifo") || attrs["FifoQueue"] == "true" {
		return nil, errUnsupported("FIFO queues")
	}
	if !validQueueName(name) {
		return nil, errInvalidParameterValue("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
	}
	now := s.clock.Now()
	if q, ok := s.queues[name]; ok {
		for _, k := range sortedKeys(attrs) {
			cur, _ := s.attrLocked(q, k)
			want := attrs[k]
			if k == "RedrivePolicy" {
				if rp, aerr := s.parseRedriveLocked(want, name); aerr == nil && q.attrs.redrive != nil && *rp == *q.attrs.redrive {
					continue
				}
			}
			if cur != want {
				return nil, clientErr("QueueNameExists", "QueueAlreadyExists",
					"A queue already exists with the same name and a different value for attribute %s", k)
			}
		}
		return q, nil
	}
	if at, ok := s.deletedAt[name]; ok && now.Sub(at) < 60*time.Second {
		return nil, clientErr("QueueDeletedRecently", "AWS.SimpleQueueService.QueueDeletedRecently",
			"You must wait 60 seconds after deleting a queue before you can create another with the same name.")
	}
	a, aerr := s.applyAttrsLocked(defaultQueueAttrs(), attrs, name)
	if aerr != nil {
		return nil, aerr
	}
	q := newQueue(name, s.QueueARN(name), a, now)
	s.queues[name] = q
	return q, nil
}

func (s *Server) lookupLocked(queueURL *string) (*queue, *apiError) {
	if queueURL == nil || *queueURL == "" {
		return nil, errMissingParameter("QueueUrl")
	}
	account, name, ok := splitQueueURL(*queueURL)
	if !ok || account != s.account {
		return nil, errQueueDoesNotExist()
	}
	q, ok := s.queues[name]
	if !ok {
		return nil, errQueueDoesNotExist()
	}
	return q, nil
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

func intParam(name string, p *int64, def, min, max int) (int, *apiError) {
	if p == nil {
		return def, nil
	}
	if *p < int64(min) || *p > int64(max) {
		return 0, errInvalidParameterValue("Value %d for parameter %s is invalid. Reason: Must be between %d and %d, if provided.", *p, name, min, max)
	}
	return int(*p), nil
}
