// Package openaifake is an OpenAI-compatible chat completions endpoint
// (POST /v1/chat/completions) for tests, driven by the real openai-go
// client. It answers with a canned report, records every request body and
// Authorization header (so tests can assert what reached the provider),
// and can be told to be slow or to fail: 429, 500, an answer cut at
// max_tokens (finish_reason "length"), an empty answer, or garbage.
package openaifake
