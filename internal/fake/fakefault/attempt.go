package fakefault

import (
	"regexp"
	"strconv"
)

var attemptRe = regexp.MustCompile(`attempt=(\d+)`)

// Attempt reads the attempt number from the AWS SDK's amz-sdk-request
// header ("attempt=2; max=3"), so a fake can record which try of a call a
// fault hit; 0 when there is none.
func Attempt(header string) int {
	m := attemptRe.FindStringSubmatch(header)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
