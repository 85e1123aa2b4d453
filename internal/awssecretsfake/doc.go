// Package awssecretsfake is an in-process fake of the two AWS calls that
// read a secret at start: Secrets Manager GetSecretValue and Systems Manager
// Parameter Store GetParameter. It speaks the AWS JSON 1.1 protocol the
// SDK's service/secretsmanager and service/ssm clients use (POST /,
// Content-Type: application/x-amz-json-1.1, X-Amz-Target:
// secretsmanager.GetSecretValue or AmazonSSM.GetParameter). Tests drive it
// with agent/secret's own client through BaseEndpoint or
// AWS_ENDPOINT_URL_SECRETS_MANAGER / AWS_ENDPOINT_URL_SSM, and with the
// real SDK clients side by side (agent/secret's TestClientMatchesSDK) to
// prove that the fake, and so that client, speak the services' protocol.
//
// It follows the services' documented behaviour where a caller could get it
// wrong:
//
//   - GetSecretValue finds a secret by name or by its full ARN (which ends
//     in a six-character suffix, as in AWS) and returns SecretString or
//     SecretBinary with VersionId and VersionStages [AWSCURRENT];
//   - GetParameter finds a parameter by name or ARN; a SecureString comes
//     back in plaintext only with WithDecryption=true, otherwise as an
//     opaque base64 blob, as Parameter Store returns the KMS ciphertext;
//   - errors have the services' shapes: 400 with {"__type": ..., "Message"
//     or "message": ...} — ResourceNotFoundException (Secrets Manager),
//     ParameterNotFound without a message (SSM), AccessDeniedException for a
//     resource marked with Server.Deny, UnknownOperationException for any
//     other target, SerializationException for a body that is not JSON;
//   - requests must carry a SigV4 Authorization header scoped to the
//     service's signing name and the fake's region (the signature itself is
//     not checked): a client that signs for another region gets
//     InvalidSignatureException, as it would from a regional endpoint.
//
// Server.Calls records every request (target, the id asked for, the
// decryption flag, the signing region) so tests can assert what was asked.
// Not supported: version ids and stages, parameter selectors (name:version),
// partial secret ARNs, resource policies, KMS keys.
package awssecretsfake
