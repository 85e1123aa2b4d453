// Package cwfake is an in-process fake of the Amazon CloudWatch
// PutMetricData API, for tests that drive the real
// aws-sdk-go-v2/service/cloudwatch client (BaseEndpoint or
// AWS_ENDPOINT_URL_CLOUDWATCH pointed at it) and then assert which metrics
// were published, when, and how the publisher coped with throttling and
// server errors.
//
// Wire protocol. The SDK version this module pins speaks Smithy RPC v2 CBOR
// to CloudWatch, in its AWS Query compatible mode, and the fake speaks
// exactly that:
//
//   - POST /service/GraniteServiceVersion20100801/operation/PutMetricData
//     with Smithy-Protocol: rpc-v2-cbor, Content-Type: application/cbor and
//     a CBOR map body (members named as in the model: Namespace, MetricData,
//     MetricName, Dimensions, Timestamp as tag 1 epoch seconds, Value,
//     StatisticValues, Values, Counts, Unit, StorageResolution), gzip
//     Content-Encoding accepted (the SDK compresses bodies of 10 KiB and
//     more);
//   - success is 200 with an empty body (the operation has no output);
//   - an error is a CBOR map {"__type": shape id, "message": text} with the
//     X-Amzn-Query-Error header "Code;Sender|Receiver", from which the SDK
//     takes ErrorCode() — the same codes the Query protocol used:
//     InvalidParameterValue, MissingParameter, InvalidParameterCombination
//     (400, typed *types.…Exception in the SDK), InternalServiceError (500,
//     *types.InternalServiceFault), Throttling (400, a generic API error the
//     SDK's retryer classifies as a throttle), ServiceUnavailable (503);
//   - requests must be SigV4-signed for the service "monitoring" in the
//     fake's region (the signature itself is not checked).
//
// Validation follows the CloudWatch API reference for PutMetricData and
// stops at the first problem, rejecting the whole request (nothing of a
// rejected request is recorded):
//
//   - Namespace required (MissingParameter); 1–255 characters from
//     [0-9A-Za-z.-_/#: ] with at least one non-space; not starting with
//     "AWS/" (reserved for AWS services) — InvalidParameterValue;
//   - MetricData required (unless EntityMetricData, which the fake does not
//     support); at most 1000 datums;
//   - per datum: MetricName required, 1–255 characters; at most 30
//     Dimensions, each with Name (1–255 ASCII, not starting with ':') and
//     Value (1–1024 ASCII), both required and not blank; exactly one of
//     Value, StatisticValues (all four fields required) and Values
//     (InvalidParameterCombination otherwise); numbers finite (no NaN or
//     ±Inf) and within CloudWatch's range, magnitude 2^-360 to 2^360 or 0;
//     at most 150 Values, Counts as many as Values; Unit one of the model's
//     StandardUnit values; StorageResolution 1 or 60; Timestamp no more than
//     two weeks in the past and two hours in the future of the server clock.
//
// Error messages follow the Query protocol's wording ("The parameter X is
// required.", "The value V for parameter X is invalid.") but are not
// guaranteed to match CloudWatch byte for byte; tests should assert codes.
//
// Introspection. Every accepted datum is recorded with the time its request
// arrived on the server's Clock (Server.Data); every request is logged with
// its SDK invocation id and attempt number, so retries are countable
// (Server.Calls). Server.Wait and Server.WaitCalls block until a condition
// on the recorded data or calls holds, woken by every request, so tests
// wait on what they assert instead of sleeping. Faults (throttling, 500,
// 503) are injected for the next N requests or a seeded fraction of them
// (Server.InjectFault, WithSeed).
//
// Not supported: every other CloudWatch operation (UnknownOperationException),
// EntityMetricData and StrictEntityValidation, metric storage and retrieval,
// the Query (form-encoded) and JSON protocols.
package cwfake
