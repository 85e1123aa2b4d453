// Package utf8cut cuts strings and byte slices to a byte budget without
// splitting a UTF-8 sequence: the agent stores, sends and shows output,
// details and reasons under byte limits (Redis records, SQS attributes,
// notifications, prompts), and a half rune there turns valid text invalid.
// One definition of the cut serves every such limit, so a fix to it lands
// everywhere at once.
//
// A cut at byte offset i of s is on a rune boundary when i == len(s) or
// s[i] starts a rune (utf8.RuneStart: it is not a continuation byte,
// 10xxxxxx). On valid UTF-8, Head keeps the longest prefix ending on such
// a boundary, Tail the longest suffix starting on one, and the result is
// valid UTF-8. Neither gives up more than utf8.UTFMax-1 bytes of its
// budget: a cut inside a run of stray continuation bytes (invalid input,
// such as binary output) stays where the budget puts it, so a diagnostic
// that prints bytes rather than text never loses its whole output to the
// cut.
//
// Neither cut splits a redaction marker ([REDACTED:<rule>]): most text
// cut here is redacted first, and half a marker would read as text and
// lose its rule's name. A marker the budget would split is left out whole.
package utf8cut
