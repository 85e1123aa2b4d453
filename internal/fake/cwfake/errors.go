package cwfake

import (
	"fmt"
	"net/http"
)

// apiError is an error response: the shape id goes in __type, the Query
// code in X-Amzn-Query-Error, which is what the SDK reports as ErrorCode()
// for this AWS Query compatible service.
type apiError struct {
	status int
	shape  string // full shape id for __type
	query  string // Query protocol error code
	sender bool   // client fault (Sender) or server fault (Receiver)
	msgKey string // the message member's name in the model: "message" or "Message"
	msg    string
}

const ns = "com.amazonaws.cloudwatch#"

func errInvalidValue(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, shape: ns + "InvalidParameterValueException",
		query: "InvalidParameterValue", sender: true, msgKey: "message", msg: fmt.Sprintf(format, args...)}
}

// errBadValue is the Query protocol's wording for a value out of its domain.
func errBadValue(value any, param string) *apiError {
	return errInvalidValue("The value %v for parameter %s is invalid.", value, param)
}

func errMissing(param string) *apiError {
	return &apiError{status: http.StatusBadRequest, shape: ns + "MissingRequiredParameterException",
		query: "MissingParameter", sender: true, msgKey: "message", msg: "The parameter " + param + " is required."}
}

func errCombination(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, shape: ns + "InvalidParameterCombinationException",
		query: "InvalidParameterCombination", sender: true, msgKey: "message", msg: fmt.Sprintf(format, args...)}
}

func errInternal() *apiError {
	return &apiError{status: http.StatusInternalServerError, shape: ns + "InternalServiceFault",
		query: "InternalServiceError", msgKey: "Message", msg: "Internal service error"}
}

func errUnavailable() *apiError {
	return &apiError{status: http.StatusServiceUnavailable, shape: "com.amazon.coral.availability#ServiceUnavailableException",
		query: "ServiceUnavailable", msgKey: "message", msg: "Service is unavailable"}
}

func errThrottling() *apiError {
	return &apiError{status: http.StatusBadRequest, shape: "com.amazon.coral.availability#ThrottlingException",
		query: "Throttling", sender: true, msgKey: "message", msg: "Rate exceeded"}
}

func errSerialization(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, shape: "com.amazon.coral.service#SerializationException",
		query: "SerializationException", sender: true, msgKey: "message", msg: fmt.Sprintf(format, args...)}
}

func errUnknownOperation(what string) *apiError {
	return &apiError{status: http.StatusNotFound, shape: "com.amazon.coral.service#UnknownOperationException",
		query: "UnknownOperationException", sender: true, msgKey: "message",
		msg: "cwfake implements only PutMetricData, not " + what}
}
