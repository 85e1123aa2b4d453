// Package fakefault is the fault plumbing the in-repo HTTP fakes share.
// Plan serves the model-provider fakes: a script of faults handed out one
// per request, a standing fault after it, a latency every answer waits, and
// the requests recorded. Set serves the AWS protocol fakes: faults armed by
// id, each gated by a count, a skip and a probability drawn from a seedable
// source; Attempt reads which try of a call the AWS SDK made. What a fault
// looks like on the wire stays with each fake.
package fakefault
