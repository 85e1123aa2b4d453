// Package secret reads a value the agent must not keep in its config file
// or user data (the Redis URL with its password) from AWS at start, with the
// instance role's credentials: a Secrets Manager secret named by its ARN, or
// a Systems Manager SecureString parameter named by its name or ARN.
//
// The value is returned to the caller only: it is never logged, and no
// error this package returns contains it (errors name the reference and the
// cause).
package secret
