// Package bedrockfake is an Amazon Bedrock Runtime Converse endpoint
// (POST /model/{modelId}/converse, restJson1) for tests, driven by the
// real aws-sdk-go-v2 bedrockruntime client. It answers with a canned
// report, usage and stopReason, records every request body, and can be
// told to be slow or to fail: ThrottlingException (429),
// InternalServerException (500), an answer cut at max_tokens, an empty
// answer, garbage, or a ValidationException for an unknown model id.
package bedrockfake
