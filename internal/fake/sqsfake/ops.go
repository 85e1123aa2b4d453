package sqsfake

import (
	"encoding/base64"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

func (s *Server) opCreateQueue(rc reqCtx, in *createQueueIn) (any, *apiError) {
	if in.QueueName == nil {
		return nil, errMissingParameter("QueueName")
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	if _, aerr := s.createQueueLocked(*in.QueueName, in.Attributes); aerr != nil {
		return nil, aerr
	}
	return queueURLOut{QueueUrl: rc.queueURL(s.account, *in.QueueName)}, nil
}

func (s *Server) opGetQueueURL(rc reqCtx, in *getQueueURLIn) (any, *apiError) {
	if in.QueueName == nil {
		return nil, errMissingParameter("QueueName")
	}
	if in.QueueOwnerAWSAccountId != nil && *in.QueueOwnerAWSAccountId != s.account {
		return nil, errQueueDoesNotExist()
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	if _, ok := s.queues[*in.QueueName]; !ok {
		return nil, errQueueDoesNotExist()
	}
	return queueURLOut{QueueUrl: rc.queueURL(s.account, *in.QueueName)}, nil
}

func (s *Server) opGetQueueAttributes(in *getQueueAttributesIn) (any, *apiError) {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, aerr := s.lookupLocked(in.QueueUrl)
	if aerr != nil {
		return nil, aerr
	}
	q.settle(s.clock.Now())
	names := in.AttributeNames
	for _, n := range names {
		if !knownQueueAttr(n) {
			return nil, errInvalidAttributeName(n)
		}
		if n == "All" {
			names = s.allAttrNamesLocked(q)
			break
		}
	}
	out := map[string]string{}
	for _, n := range names {
		if v, ok := s.attrLocked(q, n); ok {
			out[n] = v
		}
	}
	return attributesOut{Attributes: out}, nil
}

func (s *Server) opSetQueueAttributes(in *setQueueAttributesIn) (any, *apiError) {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, aerr := s.lookupLocked(in.QueueUrl)
	if aerr != nil {
		return nil, aerr
	}
	a, aerr := s.applyAttrsLocked(q.attrs, in.Attributes, q.name)
	if aerr != nil {
		return nil, aerr
	}
	q.attrs = a
	q.modified = s.clock.Now()
	return nil, nil
}

func (s *Server) opDeleteQueue(in *queueURLIn) (any, *apiError) {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, aerr := s.lookupLocked(in.QueueUrl)
	if aerr != nil {
		return nil, aerr
	}
	q.gone = true
	q.line.wakeAll()
	delete(s.queues, q.name)
	s.deletedAt[q.name] = s.clock.Now()
	return nil, nil
}

func (s *Server) opPurgeQueue(in *queueURLIn, call *Call) (any, *apiError) {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, aerr := s.lookupLocked(in.QueueUrl)
	if aerr != nil {
		return nil, aerr
	}
	now := s.clock.Now()
	if !q.lastPurge.IsZero() && now.Sub(q.lastPurge) < 60*time.Second {
		return nil, clientErr("PurgeQueueInProgress", "AWS.SimpleQueueService.PurgeQueueInProgress",
			"Only one PurgeQueue operation on %s is allowed every 60 seconds.", q.name)
	}
	q.lastPurge = now
	for _, m := range q.msgs {
		q.remove(m, "purged")
		q.stats.Purged++
		call.N++
	}
	q.visible, q.head, q.waiting, q.expiry = nil, 0, nil, nil
	return nil, nil
}

func (s *Server) opListQueues(rc reqCtx, in *listQueuesIn) (any, *apiError) {
	max := 1000
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 1000 {
			return nil, errInvalidParameterValue("Value %d for parameter MaxResults is invalid. Reason: MaxResults must be an integer between 1 and 1000.", *in.MaxResults)
		}
		max = int(*in.MaxResults)
	}
	after := ""
	if in.NextToken != nil && *in.NextToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(*in.NextToken)
		if err != nil {
			return nil, errInvalidParameterValue("Invalid NextToken value.")
		}
		after = string(b)
	}
	prefix := ""
	if in.QueueNamePrefix != nil {
		prefix = *in.QueueNamePrefix
	}
	s.queueMu.Lock()
	names := make([]string, 0, len(s.queues))
	for n := range s.queues {
		if strings.HasPrefix(n, prefix) && n > after {
			names = append(names, n)
		}
	}
	s.queueMu.Unlock()
	sort.Strings(names)
	var out listQueuesOut
	for i, n := range names {
		if i == max {
			if in.MaxResults != nil {
				out.NextToken = base64.RawURLEncoding.EncodeToString([]byte(names[i-1]))
			}
			break
		}
		out.QueueUrls = append(out.QueueUrls, rc.queueURL(s.account, n))
	}
	return out, nil
}

// validated is a message that passed the SendMessage checks.
type validated struct {
	body     string
	delay    int
	attrs    map[string]MessageAttribute
	sysAttrs map[string]MessageAttribute
	size     int
}

var attrNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)

var numberRe = regexp.MustCompile(`^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$`)

func validChars(s string) (rune, bool) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return rune(s[i]), false
		}
		if !(r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return r, false
		}
		i += size
	}
	return 0, true
}

func convertAttrs(in map[string]attrIn, system bool) (map[string]MessageAttribute, int, *apiError) {
	if len(in) == 0 {
		return nil, 0, nil
	}
	if len(in) > 10 {
		return nil, 0, errInvalidParameterValue("Number of message attributes [%d] exceeds the allowed maximum [10].", len(in))
	}
	out := make(map[string]MessageAttribute, len(in))
	size := 0
	for name, v := range in {
		if system {
			if name != "AWSTraceHeader" {
				return nil, 0, errInvalidParameterValue("Message system attribute name '%s' is invalid.", name)
			}
		} else {
			lower := strings.ToLower(name)
			if !attrNameRe.MatchString(name) || strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") ||
				strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
				return nil, 0, errInvalidParameterValue("Message (user) attribute name '%s' is invalid.", name)
			}
		}
		if v.DataType == nil || *v.DataType == "" {
			return nil, 0, errInvalidParameterValue("The message attribute '%s' must contain non-empty message attribute type.", name)
		}
		dt := *v.DataType
		if len(v.StringListValues) > 0 || len(v.BinaryListValues) > 0 {
			return nil, 0, errInvalidParameterValue("Message attribute list values in '%s' are not supported.", name)
		}
		a := MessageAttribute{DataType: dt}
		switch baseType(dt) {
		case "String", "Number":
			if v.StringValue == nil || *v.StringValue == "" {
				return nil, 0, errInvalidParameterValue("The message attribute '%s' must contain non-empty message attribute value for message attribute type '%s'.", name, baseType(dt))
			}
			if _, ok := validChars(*v.StringValue); !ok {
				return nil, 0, errInvalidParameterValue("The message attribute '%s' contains invalid characters.", name)
			}
			if baseType(dt) == "Number" && !numberRe.MatchString(*v.StringValue) {
				return nil, 0, errInvalidParameterValue("Can't cast the value of message (user) attribute '%s' to a number.", name)
			}
			a.StringValue = *v.StringValue
			size += len(a.StringValue)
		case "Binary":
			if len(v.BinaryValue) == 0 {
				return nil, 0, errInvalidParameterValue("The message attribute '%s' must contain non-empty message attribute value for message attribute type 'Binary'.", name)
			}
			a.BinaryValue = v.BinaryValue
			size += len(a.BinaryValue)
		default:
			return nil, 0, errInvalidParameterValue("The type of message (user) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String.", name)
		}
		if system && baseType(dt) != "String" {
			return nil, 0, errInvalidParameterValue("Message system attribute '%s' must be of type String.", name)
		}
		size += len(name) + len(dt)
		out[name] = a
	}
	return out, size, nil
}

func validateMessage(q *queue, body *string, delay *int64, attrs, sys map[string]attrIn, dedupID *string) (validated, *apiError) {
	var v validated
	if body == nil || *body == "" {
		return v, errMissingParameter("MessageBody")
	}
	if dedupID != nil {
		return v, errInvalidParameterValue("The request include parameter that is not valid for this queue type")
	}
	if r, ok := validChars(*body); !ok {
		return v, errInvalidMessageContents("Invalid binary character '#x%X' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF", r)
	}
	d, aerr := intParam("DelaySeconds", delay, q.attrs.delay, 0, 900)
	if aerr != nil {
		return v, aerr
	}
	a, asize, aerr := convertAttrs(attrs, false)
	if aerr != nil {
		return v, aerr
	}
	sa, _, aerr := convertAttrs(sys, true)
	if aerr != nil {
		return v, aerr
	}
	size := len(*body) + asize
	if size > q.attrs.maxSize {
		return v, errInvalidParameterValue("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", q.attrs.maxSize)
	}
	return validated{body: *body, delay: d, attrs: a, sysAttrs: sa, size: size}, nil
}

func (s *Server) enqueueLocked(q *queue, v validated, sender string, now time.Time) *message {
	m := &message{
		id: newUUID(), body: v.body, md5Body: MD5OfBody(v.body), attrs: v.attrs, sysAttrs: v.sysAttrs,
		senderID: sender, sentAt: now, expireAt: now.Add(seconds(q.attrs.retention)),
	}
	q.add(m, now, seconds(v.delay))
	q.stats.Sent++
	return m
}

func (s *Server) opSendMessage(rc reqCtx, in *sendMessageIn, call *Call) (any, *apiError) {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, aerr := s.lookupLocked(in.QueueUrl)
	if aerr != nil {
		return nil, aerr
	}
	v, aerr := validateMessage(q, in.MessageBody, in.DelaySeconds, in.MessageAttributes, in.MessageSystemAttributes, in.MessageDeduplicationId)
	if aerr != nil {
		return nil, aerr
	}
	now := s.clock.Now()
	q.settle(now)
	m := s.enqueueLocked(q, v, rc.sender, now)
	call.MessageIDs = []string{m.id}
	call.N = 1
	return sendMessageOut{
		MD5OfMessageBody: m.md5Body, MD5OfMessageAttributes: MD5OfMessageAttributes(m.attrs),
		MD5OfMessageSystemAttributes: MD5OfMessageAttributes(m.sysAttrs), MessageId: m.id,
	}, nil
}

var batchIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// checkBatchIDs applies the request-level batch checks shared by every batch
// action.
func checkBatchIDs(ids []*string) *apiError {
	if len(ids) == 0 {
		return errEmptyBatch()
	}
	if len(ids) > 10 {
		return errTooManyEntries(len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id == nil || !batchIDRe.MatchString(*id) {
			s := ""
			if id != nil {
				s = *id
			}
			return errInvalidBatchEntryID(s)
		}
		if seen[*id] {
			return errIdsNotDistinct(*id)
		}
		seen[*id] = true
	}
	return nil
}

func failedEntry(id string, e *apiError) batchResultErrorEntry {
	return batchResultErrorEntry{Id: id, Code: e.query, Message: e.msg, SenderFault: e.sender}
}

func (s *Server) opSendMessageBatch(rc reqCtx, in *sendMessageBatchIn, call *Call) (any, *apiError) {
	ids := make([]*string, len(in.Entries))
	for i := range in.Entries {
		ids[i] = in.Entries[i].Id
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, aerr := s.lookupLocked(in.QueueUrl)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkBatchIDs(ids); aerr != nil {
		return nil, aerr
	}
	call.N = len(in.Entries)
	out := sendMessageBatchOut{Successful: []sendMessageBatchResultEntry{}, Failed: []batchResultErrorEntry{}}
	vs := make([]validated, len(in.Entries))
	errs := make([]*apiError, len(in.Entries))
	total := 0
	for i, e := range in.Entries {
		vs[i], errs[i] = validateMessage(q, e.MessageBody, e.DelaySeconds, e.MessageAttributes, e.MessageSystemAttributes, e.MessageDeduplicationId)
		total += vs[i].size
	}
	if limit := max(maxBatchBytes, q.attrs.maxSize); total > limit {
		return nil, errBatchTooLong(total)
	}
	now := s.clock.Now()
	q.settle(now)
	for i, e := range in.Entries {
		if errs[i] != nil {
			out.Failed = append(out.Failed, failedEntry(*e.Id, errs[i]))
			continue
		}
		if s.entryFails(rc.entryFault, call) {
			out.Failed = append(out.Failed, failedEntry(*e.Id, errEntryInternal()))
			continue
		}
		m := s.enqueueLocked(q, vs[i], rc.sender, now)
		call.MessageIDs = append(call.MessageIDs, m.id)
		out.Successful = append(out.Successful, sendMessageBatchResultEntry{
			Id: *e.Id, MessageId: m.id, MD5OfMessageBody: m.md5Body,
			MD5OfMessageAttributes:       MD5OfMessageAttributes(m.attrs),
			MD5OfMessageSystemAttributes: MD5OfMessageAttributes(m.sysAttrs),
		})
	}
	call.Failed = len(out.Failed)
	return out, nil
}

var systemAttrNames = map[string]bool{
	"All": true, "SenderId": true, "SentTimestamp": true, "ApproximateReceiveCount": true,
	"ApproximateFirstReceiveTimestamp": true, "SequenceNumber": true, "MessageDeduplicationId": true,
	"MessageGroupId": true, "AWSTraceHeader": true, "DeadLetterQueueSourceArn": true,
}

func (s *Server) opReceiveMessage(rc reqCtx, in *receiveMessageIn, call *Call) (any, *apiError) {
	maxN, aerr := intParam("MaxNumberOfMessages", in.MaxNumberOfMessages, 1, 1, 10)
	if aerr != nil {
		return nil, aerr
	}
	for _, n := range in.MessageSystemAttributeNames {
		if !systemAttrNames[n] {
			return nil, errInvalidAttributeName(n)
		}
	}
	sysNames := append(append([]string{}, in.AttributeNames...), in.MessageSystemAttributeNames...)

	s.queueMu.Lock()
	q, aerr := s.lookupLocked(in.QueueUrl)
	if aerr != nil {
		s.queueMu.Unlock()
		return nil, aerr
	}
	vt, aerr := intParam("VisibilityTimeout", in.VisibilityTimeout, q.attrs.visibility, 0, 43200)
	if aerr != nil {
		s.queueMu.Unlock()
		return nil, aerr
	}
	wait, aerr := intParam("WaitTimeSeconds", in.WaitTimeSeconds, q.attrs.wait, 0, 20)
	if aerr != nil {
		s.queueMu.Unlock()
		return nil, aerr
	}
	call.Wait = seconds(wait)
	deadline := s.clock.Now().Add(seconds(wait))
	var p *poll     // this receive's place in line, once it has waited
	behind := false // woken by its timer with polls in line before it
	for {
		now := s.clock.Now()
		var got []*message
		var handles []string
		if behind {
			// What becomes visible now is for the polls that waited
			// longer: settle wakes the first.
			q.settle(now)
		} else {
			got, handles, aerr = s.receiveLocked(q, maxN, seconds(vt), now)
			if aerr != nil {
				s.queueMu.Unlock()
				return nil, aerr
			}
		}
		if len(got) > 0 || !now.Before(deadline) || s.isClosed() {
			if rc.duplicate {
				for _, m := range got { // delivered, yet visible again at once
					q.hide(m, stateInflight, now)
				}
				q.settle(now)
			}
			q.passOn()
			out := receiveMessageOut{}
			for i, m := range got {
				out.Messages = append(out.Messages, renderMessage(m, handles[i], sysNames, in.MessageAttributeNames))
				call.MessageIDs = append(call.MessageIDs, m.id)
				call.ReceiptHandles = append(call.ReceiptHandles, handles[i])
			}
			call.N = len(got)
			s.queueMu.Unlock()
			return out, nil
		}
		next := deadline
		if at, ok := q.nextWake(); ok && at.Before(next) {
			next = at
		}
		if p == nil {
			p = q.line.newPoll()
		}
		q.line.park(p)
		q.waiters++
		s.queueMu.Unlock()

		t := s.clock.NewTimer(next.Sub(now))
		select {
		case <-p.wake:
		case <-t.C():
		case <-rc.ctx.Done():
		case <-s.closed:
		}
		t.Stop()

		s.queueMu.Lock()
		q.waiters--
		behind = q.line.unpark(p)
		if rc.ctx.Err() != nil {
			q.passOn()
			s.queueMu.Unlock()
			return nil, nil
		}
		if q.gone {
			s.queueMu.Unlock()
			return nil, errQueueDoesNotExist()
		}
	}
}

// receiveLocked takes up to max visible messages, moving to the dead-letter
// queue those whose receive count already reached maxReceiveCount.
func (s *Server) receiveLocked(q *queue, max int, vt time.Duration, now time.Time) ([]*message, []string, *apiError) {
	q.settle(now)
	var got []*message
	var handles []string
	for len(got) < max {
		if q.nInflight >= s.inflight {
			if len(got) == 0 {
				return nil, nil, errOverLimit(s.inflight)
			}
			break
		}
		m := q.popVisible()
		if m == nil {
			break
		}
		if rp := q.attrs.redrive; rp != nil && m.receiveCount >= rp.MaxReceiveCount {
			if dlq := s.queueByARNLocked(rp.DeadLetterTargetArn); dlq != nil && dlq != q {
				s.moveToDLQLocked(q, dlq, m, now)
				continue
			}
		}
		m.receiveCount++
		m.hist.ReceiveCount = m.receiveCount
		if m.receiveCount == 1 || m.firstRecvAt.IsZero() {
			m.firstRecvAt = now
		}
		m.receivedAt = now
		q.hide(m, stateInflight, now.Add(vt))
		q.stats.Received++
		got = append(got, m)
		handles = append(handles, s.newHandle(q.name, m.id, m.receiveCount))
	}
	return got, handles, nil
}

// moveToDLQLocked moves m as SQS redrive does: same message ID, body,
// attributes and SentTimestamp (so retention counts from the original
// enqueue), receive count kept, DeadLetterQueueSourceArn set.
func (s *Server) moveToDLQLocked(src, dlq *queue, m *message, now time.Time) {
	src.remove(m, "moved")
	src.stats.MovedToDLQ++
	dlq.settle(now)
	nm := &message{
		id: m.id, body: m.body, md5Body: m.md5Body, attrs: m.attrs, sysAttrs: m.sysAttrs,
		senderID: m.senderID, sentAt: m.sentAt, firstRecvAt: m.firstRecvAt, receiveCount: m.receiveCount,
		expireAt: m.sentAt.Add(seconds(dlq.attrs.retention)), dlqSource: src.arn,
	}
	if !nm.expireAt.After(now) {
		return
	}
	dlq.add(nm, now, 0)
	dlq.stats.MovedIn++
}

func renderMessage(m *message, handle string, sysNames, attrNames []string) messageOut {
	out := messageOut{MessageId: m.id, ReceiptHandle: handle, MD5OfBody: m.md5Body, Body: m.body}
	want := func(n string) bool {
		for _, x := range sysNames {
			if x == "All" || x == n {
				return true
			}
		}
		return false
	}
	attrs := map[string]string{}
	if want("SenderId") {
		attrs["SenderId"] = m.senderID
	}
	if want("SentTimestamp") {
		attrs["SentTimestamp"] = ms(m.sentAt)
	}
	if want("ApproximateReceiveCount") {
		attrs["ApproximateReceiveCount"] = strconv.Itoa(m.receiveCount)
	}
	if want("ApproximateFirstReceiveTimestamp") {
		attrs["ApproximateFirstReceiveTimestamp"] = ms(m.firstRecvAt)
	}
	if a, ok := m.sysAttrs["AWSTraceHeader"]; ok && want("AWSTraceHeader") {
		attrs["AWSTraceHeader"] = a.StringValue
	}
	if m.dlqSource != "" && want("DeadLetterQueueSourceArn") {
		attrs["DeadLetterQueueSourceArn"] = m.dlqSource
	}
	if len(attrs) > 0 {
		out.Attributes = attrs
	}
	sel := map[string]MessageAttribute{}
	for name, a := range m.attrs {
		for _, pat := range attrNames {
			if pat == "All" || pat == ".*" || pat == name ||
				strings.HasSuffix(pat, ".*") && strings.HasPrefix(name, strings.TrimSuffix(pat, "*")) {
				sel[name] = a
				break
			}
		}
	}
	if len(sel) > 0 {
		out.MessageAttributes = sel
		out.MD5OfMessageAttributes = MD5OfMessageAttributes(sel)
	}
	return out
}

// changeVisibilityLocked implements ChangeMessageVisibility for one handle.
func (s *Server) changeVisibilityLocked(q *queue, handle *string, vtp *int64, now time.Time) *apiError {
	if handle == nil || *handle == "" {
		return errMissingParameter("ReceiptHandle")
	}
	vt := 0 // the SDK omits a zero VisibilityTimeout
	if vtp != nil {
		if *vtp < 0 || *vtp > 43200 {
			return errInvalidParameterValue("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200.", *vtp)
		}
		vt = int(*vtp)
	}
	qname, id, n, ok := s.parseHandle(*handle)
	if !ok || qname != q.name {
		return errReceiptHandleIsInvalid(*handle)
	}
	q.settle(now)
	m := q.msgs[id]
	if m == nil || m.receiveCount != n {
		return errStaleHandle(*handle)
	}
	if m.state != stateInflight {
		return errNotInflight()
	}
	until := now.Add(seconds(vt))
	if until.Sub(m.receivedAt) > maxVisibility {
		return errInvalidParameterValue("Value %d for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds].", vt)
	}
	q.hide(m, stateInflight, until)
	if vt == 0 {
		q.settle(now)
	}
	return nil
}

func (s *Server) opChangeMessageVisibility(in *changeVisibilityIn, call *Call) (any, *apiError) {
	return nil, s.applyOne(in.QueueUrl, in.ReceiptHandle, call, func(q *queue, now time.Time) *apiError {
		return s.changeVisibilityLocked(q, in.ReceiptHandle, in.VisibilityTimeout, now)
	})
}

// applyOne runs a single-message operation under the queue lock, logging
// its receipt handle in the call.
func (s *Server) applyOne(queueURL, handle *string, call *Call, apply func(q *queue, now time.Time) *apiError) *apiError {
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, aerr := s.lookupLocked(queueURL)
	if aerr != nil {
		return aerr
	}
	if handle != nil {
		call.ReceiptHandles = []string{*handle}
	}
	call.N = 1
	return apply(q, s.clock.Now())
}

func (s *Server) opChangeMessageVisibilityBatch(rc reqCtx, in *changeVisibilityBatchIn, call *Call) (any, *apiError) {
	entries := make([]batchEntry, len(in.Entries))
	for i, e := range in.Entries {
		entries[i] = batchEntry{id: e.Id, handle: e.ReceiptHandle}
	}
	return s.applyBatch(rc, in.QueueUrl, entries, call, func(q *queue, i int, now time.Time) *apiError {
		return s.changeVisibilityLocked(q, in.Entries[i].ReceiptHandle, in.Entries[i].VisibilityTimeout, now)
	})
}

// batchEntry is what applyBatch needs of one entry of a batch request.
type batchEntry struct {
	id, handle *string
}

// applyBatch runs one entry operation per entry of a batch request under
// the queue lock, after SQS's batch checks (queue, distinct ids, size),
// collecting per-entry successes and failures (injected entry faults
// included) the way SQS answers them.
func (s *Server) applyBatch(rc reqCtx, queueURL *string, entries []batchEntry, call *Call, apply func(q *queue, i int, now time.Time) *apiError) (any, *apiError) {
	ids := make([]*string, len(entries))
	for i := range entries {
		ids[i] = entries[i].id
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	q, aerr := s.lookupLocked(queueURL)
	if aerr != nil {
		return nil, aerr
	}
	if aerr := checkBatchIDs(ids); aerr != nil {
		return nil, aerr
	}
	now := s.clock.Now()
	out := batchOut{Successful: []idEntry{}, Failed: []batchResultErrorEntry{}}
	call.N = len(entries)
	for i, e := range entries {
		if e.handle != nil {
			call.ReceiptHandles = append(call.ReceiptHandles, *e.handle)
		}
		if s.entryFails(rc.entryFault, call) {
			out.Failed = append(out.Failed, failedEntry(*e.id, errEntryInternal()))
			continue
		}
		if aerr := apply(q, i, now); aerr != nil {
			out.Failed = append(out.Failed, failedEntry(*e.id, aerr))
			continue
		}
		out.Successful = append(out.Successful, idEntry{Id: *e.id})
	}
	call.Failed = len(out.Failed)
	return out, nil
}

// deleteLocked implements DeleteMessage for one handle; see the package
// documentation for stale handles.
func (s *Server) deleteLocked(q *queue, handle *string, now time.Time, call *Call) *apiError {
	if handle == nil || *handle == "" {
		return errMissingParameter("ReceiptHandle")
	}
	qname, id, n, ok := s.parseHandle(*handle)
	if !ok || qname != q.name {
		return errReceiptHandleIsInvalid(*handle)
	}
	q.settle(now)
	m := q.msgs[id]
	switch {
	case m == nil: // already deleted, expired, purged or moved: success, as in SQS
	case m.receiveCount != n:
		q.stats.StaleDeletes++
		call.StaleDeletes++
	default:
		q.remove(m, "deleted")
		q.stats.Deleted++
		call.MessageIDs = append(call.MessageIDs, id)
	}
	return nil
}

func (s *Server) opDeleteMessage(in *deleteMessageIn, call *Call) (any, *apiError) {
	return nil, s.applyOne(in.QueueUrl, in.ReceiptHandle, call, func(q *queue, now time.Time) *apiError {
		return s.deleteLocked(q, in.ReceiptHandle, now, call)
	})
}

func (s *Server) opDeleteMessageBatch(rc reqCtx, in *deleteMessageBatchIn, call *Call) (any, *apiError) {
	entries := make([]batchEntry, len(in.Entries))
	for i, e := range in.Entries {
		entries[i] = batchEntry{id: e.Id, handle: e.ReceiptHandle}
	}
	return s.applyBatch(rc, in.QueueUrl, entries, call, func(q *queue, i int, now time.Time) *apiError {
		return s.deleteLocked(q, in.Entries[i].ReceiptHandle, now, call)
	})
}
