// Package utf8cut cuts strings and byte slices to a byte budget without
// splitting a UTF-8 sequence: the agent stores, sends and shows output,
// details and reasons under byte limits (Redis records, SQS attributes,
// notifications, prompts), and a half rune there turns valid text invalid.
// One definition of the cut serves every such limit, so a fix to it lands
// everywhere at once.
//
// A cut at byte offset i of s is on a rune boundary when i == len(s) or
// s[i] starts a rune (utf8.RuneStart: it is not a continuation byte,
// 10xxxxxx). Head keeps the longest prefix ending on such a boundary,
// Tail the longest suffix starting on one. Neither decodes: on valid UTF-8
// the result is valid UTF-8; on invalid input they still stop at the
// nearest byte that is not a continuation byte, so a run of stray
// continuation bytes next to the cut is dropped with it, however long.
package utf8cut
