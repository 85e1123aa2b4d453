variable "region" {
  description = "AWS region of the fleet."
  type        = string
}

variable "name" {
  description = "Name of the Auto Scaling group and prefix of everything the module creates."
  type        = string
  default     = "autodiag"
}

variable "subnet_ids" {
  description = "Private subnets the instances run in. They need a route to SQS, Auto Scaling and CloudWatch (NAT or VPC endpoints) and to Redis."
  type        = list(string)
}

variable "security_group_ids" {
  description = "Security groups of the instances; must allow egress to Redis and HTTPS."
  type        = list(string)
}

variable "instance_type" {
  description = "EC2 instance type."
  type        = string
  default     = "t3.small"
}

variable "ami_ssm_parameter" {
  description = "SSM parameter holding the AMI id (systemd-based Linux)."
  type        = string
  default     = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
}

variable "min_size" {
  description = "Minimum number of instances."
  type        = number
  default     = 2
}

variable "max_size" {
  description = "Maximum number of instances."
  type        = number
  default     = 6
}

variable "desired_capacity" {
  description = "Instances to start with."
  type        = number
  default     = 2
}

variable "autodiag_binary_url" {
  description = "HTTPS URL of the linux/amd64 autodiag release binary that user data installs where the shipped unit's ExecStart looks (/usr/local/bin/autodiag), with that unit in /etc/systemd/system. Set this or autodiag_package_url."
  type        = string
  default     = null
}

variable "autodiag_binary_sha256" {
  description = "Hex SHA-256 of the binary at autodiag_binary_url; user data refuses to install anything else."
  type        = string
  default     = null

  validation {
    condition     = var.autodiag_binary_sha256 == null || can(regex("^[0-9a-f]{64}$", var.autodiag_binary_sha256))
    error_message = "autodiag_binary_sha256 must be 64 lowercase hex digits."
  }
}

variable "autodiag_package_url" {
  description = "HTTPS URL of an autodiag release package that user data installs instead of the bare binary: a .deb for Debian or Ubuntu AMIs, an .rpm for Amazon Linux and other rpm-based AMIs (the format is read from the URL's path). The package brings /usr/bin/autodiag, the shipped unit in /lib/systemd/system with its drop-in, and the autodiag user. Set this or autodiag_binary_url."
  type        = string
  default     = null

  validation {
    condition     = var.autodiag_package_url == null || can(regex("\\.(deb|rpm)(?:\\?.*)?$", var.autodiag_package_url))
    error_message = "autodiag_package_url must name a .deb or .rpm file (a query string after it is allowed)."
  }
}

variable "autodiag_package_sha256" {
  description = "Hex SHA-256 of the package at autodiag_package_url (its line in the release's checksums.txt); user data refuses to install anything else."
  type        = string
  default     = null

  validation {
    condition     = var.autodiag_package_sha256 == null || can(regex("^[0-9a-f]{64}$", var.autodiag_package_sha256))
    error_message = "autodiag_package_sha256 must be 64 lowercase hex digits."
  }
}

variable "redis_url_secret_arn" {
  description = "ARN of the secret holding the fleet's Redis URL (rediss://user:password@host:6379/0): a Secrets Manager secret (full ARN) or an SSM SecureString parameter. The agent reads it at start (redis.url_secret); the URL itself never reaches user data or Terraform state."
  type        = string
}

variable "redis_url_secret_kms_key_arn" {
  description = "ARN of the customer managed KMS key encrypting the Redis URL secret; null for the AWS managed key."
  type        = string
  default     = null
}

variable "results_bucket" {
  description = "Existing S3 bucket for the full task outputs (results.s3); null leaves the upload off. Passed to the module, which grants s3:PutObject under results_prefix."
  type        = string
  default     = null
}

variable "results_prefix" {
  description = "Key prefix of the full task outputs in results_bucket (results.s3.prefix)."
  type        = string
  default     = "autodiag"
}

variable "results_kms_key_arn" {
  description = "Customer managed KMS key for the outputs (results.s3.sse aws:kms); null for SSE-S3."
  type        = string
  default     = null
}

variable "lifecycle_source" {
  description = "imds (poll instance metadata) or sqs (lifecycle notification queue); passed to the module."
  type        = string
  default     = "imds"
}

variable "alarm_sns_topic_arn" {
  description = "SNS topic paged by the alarms; null for none."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}

variable "launch_heartbeat_timeout" {
  description = "Seconds a new instance may stay in Pending:Wait before its launch hook ABANDONs it: the time an install (download, package, first start) may take, and how long a failed one waits to be replaced."
  type        = number
  default     = 600
}

variable "admin_token_secret_arn" {
  description = "Secrets Manager secret (full ARN) or SSM SecureString parameter ARN holding the admin API token (admin_auth.bearer_token_secret). Set, the admin API listens on 0.0.0.0:9464 and requires the token; null keeps it on loopback."
  type        = string
  default     = null
}
