package sqsfake

import "fmt"

// apiError is an SQS error as the JSON protocol returns it.
type apiError struct {
	status    int    // HTTP status
	typ       string // modeled shape name, sent as __type com.amazonaws.sqs#<typ>
	namespace string // default "com.amazonaws.sqs"
	query     string // x-amzn-query-error code
	sender    bool   // Sender (client) or Receiver (server) fault
	msg       string
}

func (e *apiError) Error() string { return e.query + ": " + e.msg }

func (e *apiError) fullType() string {
	ns := e.namespace
	if ns == "" {
		ns = "com.amazonaws.sqs"
	}
	return ns + "#" + e.typ
}

func clientErr(typ, query, format string, args ...any) *apiError {
	return &apiError{status: 400, typ: typ, query: query, sender: true, msg: fmt.Sprintf(format, args...)}
}

func errQueueDoesNotExist() *apiError {
	return clientErr("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue",
		"The specified queue does not exist.")
}

func errInvalidParameterValue(format string, args ...any) *apiError {
	// Not a modeled shape: the SDK returns a *smithy.GenericAPIError whose
	// ErrorCode() is the query code.
	return clientErr("InvalidParameterValue", "InvalidParameterValue", format, args...)
}

func errMissingParameter(name string) *apiError {
	return clientErr("MissingParameter", "MissingParameter",
		"The request must contain the parameter %s.", name)
}

func errReceiptHandleIsInvalid(h string) *apiError {
	return clientErr("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid",
		"The input receipt handle \"%s\" is not a valid receipt handle.", h)
}

func errStaleHandle(h string) *apiError {
	return errInvalidParameterValue("Value %s for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", h)
}

func errNotInflight() *apiError {
	return clientErr("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight",
		"The message referred to isn't in flight.")
}

func errInvalidAttributeName(n string) *apiError {
	return clientErr("InvalidAttributeName", "InvalidAttributeName", "Unknown Attribute %s.", n)
}

func errInvalidAttributeValue(format string, args ...any) *apiError {
	return clientErr("InvalidAttributeValue", "InvalidAttributeValue", format, args...)
}

func errEmptyBatch() *apiError {
	return clientErr("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest",
		"There should be at least one entry in the request.")
}

func errTooManyEntries(n int) *apiError {
	return clientErr("TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
		"Maximum number of entries per request are 10. You have sent %d.", n)
}

func errIdsNotDistinct(id string) *apiError {
	return clientErr("BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
		"Id %s repeated.", id)
}

func errInvalidBatchEntryID(id string) *apiError {
	return clientErr("InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId",
		"A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long. Got %q.", id)
}

func errBatchTooLong(n int) *apiError {
	return clientErr("BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong",
		"Batch requests cannot be longer than 262144 bytes. You have sent %d bytes.", n)
}

func errInvalidMessageContents(format string, args ...any) *apiError {
	return clientErr("InvalidMessageContents", "InvalidMessageContents", format, args...)
}

func errOverLimit(n int) *apiError {
	e := clientErr("OverLimit", "OverLimit", "Too many messages in flight: the limit of %d in-flight messages is reached.", n)
	e.status = 403
	return e
}

func errThrottled(code string) *apiError {
	switch code {
	case "", "ThrottlingException":
		return &apiError{status: 400, typ: "ThrottlingException", namespace: "com.amazon.coral.availability",
			query: "ThrottlingException", sender: true, msg: "Rate exceeded"}
	default: // e.g. RequestThrottled, the modeled SQS shape
		return &apiError{status: 400, typ: code, query: code, sender: true, msg: "Rate exceeded"}
	}
}

func errInternal() *apiError {
	return &apiError{status: 500, typ: "InternalError", namespace: "com.amazon.coral.service",
		query: "InternalError", msg: "We encountered an internal error. Please try again."}
}

func errUnsupported(op string) *apiError {
	return clientErr("UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation",
		"The operation %s is not supported by sqsfake.", op)
}
