// Package openaifake is an OpenAI-compatible chat completions endpoint
// (POST /v1/chat/completions) for tests, checked against the API
// reference's request shapes (roles, tools, tool_calls answered by role
// tool messages) and driven by autodiag's own client. It answers with a
// canned report or queued replies (tool calls included), records every
// request body and Authorization header (so tests can assert what reached
// the provider), and can be told to be slow or to fail: 429, 500, an
// answer cut at max_tokens (finish_reason "length"), an empty answer,
// garbage, or a hostile answer of any size streamed (Huge).
package openaifake
