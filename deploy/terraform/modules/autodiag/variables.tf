variable "name" {
  description = "Name prefix for every resource the module creates (queues, role, alarms). Lowercase letters, digits and dashes."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9-]{0,39}$", var.name))
    error_message = "name must be 1-40 characters of lowercase letters, digits and dashes."
  }
}

variable "asg_name" {
  description = "Name of the existing Auto Scaling group the agents run in. The lifecycle hook is attached to it and the instance policy is limited to its ARN."
  type        = string
}

variable "lifecycle_source" {
  description = "How agents learn about termination besides SIGTERM: \"imds\" polls instance metadata (no notification queue is created) or \"sqs\" reads ASG lifecycle notifications from a queue this module creates."
  type        = string
  default     = "imds"

  validation {
    condition     = contains(["imds", "sqs"], var.lifecycle_source)
    error_message = "lifecycle_source must be \"imds\" or \"sqs\"."
  }
}

variable "lifecycle_hook_name" {
  description = "Name of the EC2_INSTANCE_TERMINATING lifecycle hook. Null means \"<name>-drain\". Must match lifecycle.hook_name in the agent config."
  type        = string
  default     = null
}

variable "create_lifecycle_hooks" {
  description = "Create the lifecycle hooks as aws_autoscaling_lifecycle_hook resources on asg_name. False: the caller puts the lifecycle_hooks output in its group as initial_lifecycle_hook blocks, so the hooks exist before the first instance launches and the group can depend on the instance role's policy without a cycle (the example does)."
  type        = bool
  default     = true
}

variable "launch_hook" {
  description = "Create an EC2_INSTANCE_LAUNCHING lifecycle hook that the agent completes once ready (lifecycle.launch_hook_name); it times out with ABANDON, so an instance whose agent never gets ready is replaced."
  type        = bool
  default     = false
}

variable "launch_hook_name" {
  description = "Name of the launch hook (launch_hook = true). Null means \"<name>-launch\". Must match lifecycle.launch_hook_name in the agent config."
  type        = string
  default     = null
}

variable "launch_heartbeat_timeout" {
  description = "Heartbeat timeout of the launch hook in seconds: the agent heartbeats it every lifecycle.heartbeat_interval while its readiness checks fail, and completes it by lifecycle.launch_timeout; if the agent is not running at all, the instance is abandoned after this long."
  type        = number
  default     = 600

  validation {
    condition     = var.launch_heartbeat_timeout >= 30 && var.launch_heartbeat_timeout <= 7200
    error_message = "launch_heartbeat_timeout must be between 30 and 7200 seconds (AWS limits)."
  }
}

variable "heartbeat_timeout" {
  description = "Lifecycle hook heartbeat timeout in seconds. Must exceed 2x the agent's lifecycle.heartbeat_interval; the hook's global timeout is min(48h, 100 x this)."
  type        = number
  default     = 300

  validation {
    condition     = var.heartbeat_timeout >= 30 && var.heartbeat_timeout <= 7200
    error_message = "heartbeat_timeout must be between 30 and 7200 seconds (AWS limits)."
  }
}

variable "default_result" {
  description = "Action Auto Scaling takes when the hook times out without a CompleteLifecycleAction: CONTINUE or ABANDON. Both terminate the instance; ABANDON skips remaining hooks."
  type        = string
  default     = "CONTINUE"

  validation {
    condition     = contains(["CONTINUE", "ABANDON"], var.default_result)
    error_message = "default_result must be CONTINUE or ABANDON."
  }
}

variable "max_receive_count" {
  description = "Receives of a task message before SQS moves it to the dead-letter queue (redrive policy maxReceiveCount)."
  type        = number
  default     = 5

  validation {
    condition     = var.max_receive_count >= 1 && var.max_receive_count <= 1000
    error_message = "max_receive_count must be between 1 and 1000."
  }
}

variable "visibility_timeout_seconds" {
  description = "Default visibility timeout of the task queue in seconds. Keep equal to the agent's queue.visibility_timeout; the agent extends it while a task runs."
  type        = number
  default     = 60
}

variable "message_retention_seconds" {
  description = "How long the task queue keeps an unreceived task, in seconds. Tasks older than the agent's queue.max_age end as stale anyway."
  type        = number
  default     = 86400
}

variable "dlq_message_retention_seconds" {
  description = "How long the dead-letter queue keeps messages, in seconds (maximum 14 days) so an operator can inspect them."
  type        = number
  default     = 1209600
}

variable "metrics_namespace" {
  description = "CloudWatch namespace the agent publishes DrainSeconds and LimiterDegraded to. Must match cloudwatch.namespace in the agent config; PutMetricData is only allowed into this namespace."
  type        = string
  default     = "autodiag"
}

variable "drain_stuck_minutes" {
  description = "The drain-stuck alarm fires when the maximum DrainSeconds of the group exceeds this many minutes. It must lie between the longest healthy drain and the longest an agent keeps publishing while its completion fails; see \"Timeouts that must nest\" in docs/operations.md (default: for lifecycle.drain_timeout 10m)."
  type        = number
  default     = 11

  validation {
    condition     = var.drain_stuck_minutes > 0 && floor(var.drain_stuck_minutes) == var.drain_stuck_minutes
    error_message = "drain_stuck_minutes must be a positive whole number."
  }
}

variable "terminating_stuck_minutes" {
  description = "The instance-terminating alarm fires when the group has had an instance in a Terminating state (GroupTerminatingInstances > 0) for this many consecutive minutes. Null means drain_stuck_minutes + 5: a healthy drain that uses its whole budget is followed by the EC2 shutdown. Needs enabled_metrics on the group."
  type        = number
  default     = null

  validation {
    condition     = var.terminating_stuck_minutes == null ? true : (var.terminating_stuck_minutes > 0 && var.terminating_stuck_minutes <= 1440 && floor(var.terminating_stuck_minutes) == var.terminating_stuck_minutes)
    error_message = "terminating_stuck_minutes must be a whole number of minutes between 1 and 1440 (CloudWatch evaluates at most one day)."
  }
}

variable "task_queue_age_alarm_seconds" {
  description = "The task-queue-age alarm fires when the oldest task on the task queue has waited longer than this many seconds (ApproximateAgeOfOldestMessage): no agent consumes. The default is the agent's queue.max_age (1h), past which tasks end stale unrun whatever the cause; deferrals longer than it trip it too."
  type        = number
  default     = 3600

  validation {
    condition     = var.task_queue_age_alarm_seconds >= 60
    error_message = "task_queue_age_alarm_seconds must be at least 60."
  }
}

variable "lifecycle_queue_age_alarm_seconds" {
  description = "With lifecycle_source = \"sqs\": the lifecycle-queue-age alarm fires when a lifecycle notification has waited longer than this many seconds (ApproximateAgeOfOldestMessage): no agent reads the queue. An agent holds its own notification (in flight) for its whole drain, so keep it above the longest healthy drain. Null: terminating_stuck_minutes x 60."
  type        = number
  default     = null

  validation {
    condition     = var.lifecycle_queue_age_alarm_seconds == null ? true : var.lifecycle_queue_age_alarm_seconds >= 60
    error_message = "lifecycle_queue_age_alarm_seconds must be at least 60."
  }
}

variable "redis_url_secret_arn" {
  description = "ARN of the secret holding the Redis URL (redis.url_secret in the agent config): a Secrets Manager secret (full ARN, with its 6-character suffix) or an SSM SecureString parameter. The instance role may read exactly this ARN. Null grants nothing."
  type        = string
  default     = null

  validation {
    condition     = var.redis_url_secret_arn == null ? true : can(regex("^arn:[a-z-]+:(secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}|ssm:[a-z0-9-]+:[0-9]{12}:parameter/[A-Za-z0-9/_.-]+)$", var.redis_url_secret_arn))
    error_message = "redis_url_secret_arn must be a full Secrets Manager secret ARN (ending in -XXXXXX) or an SSM parameter ARN (arn:...:ssm:REGION:ACCOUNT:parameter/NAME)."
  }
}

variable "redis_url_secret_kms_key_arn" {
  description = "ARN of the customer managed KMS key that encrypts redis_url_secret_arn. Null: the AWS managed key (aws/secretsmanager or aws/ssm), which needs no grant. When set, the role may kms:Decrypt with it only through Secrets Manager or SSM."
  type        = string
  default     = null

  validation {
    condition     = var.redis_url_secret_kms_key_arn == null ? true : can(regex("^arn:[a-z-]+:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]+$", var.redis_url_secret_kms_key_arn))
    error_message = "redis_url_secret_kms_key_arn must be a KMS key ARN (arn:...:kms:REGION:ACCOUNT:key/ID)."
  }
}

variable "report_model_arn" {
  description = "ARN of the Bedrock model root-cause reports use (report.model with report.provider bedrock): a foundation model (arn:aws:bedrock:REGION::foundation-model/ID) or an inference profile. The instance role may bedrock:InvokeModel exactly this ARN. Null grants nothing (reports off, or the openai provider)."
  type        = string
  default     = null

  validation {
    condition     = var.report_model_arn == null ? true : can(regex("^arn:[a-z-]+:bedrock:[a-z0-9-]+:([0-9]{12})?:(foundation-model|inference-profile|application-inference-profile|provisioned-model|custom-model)/[A-Za-z0-9._:/-]+$", var.report_model_arn))
    error_message = "report_model_arn must be a Bedrock model or inference profile ARN (arn:...:bedrock:REGION:[ACCOUNT]:foundation-model/ID)."
  }
}

variable "credential_secret_arns" {
  description = "ARNs of the secrets behind the agent config's other *_secret keys (admin_auth and intake.auth tokens or passwords, notify[].url_secret and secret_secret, report.api_key_secret): full Secrets Manager secret ARNs (with the 6-character suffix) or SSM parameter ARNs. The instance role may secretsmanager:GetSecretValue or ssm:GetParameter exactly these."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.credential_secret_arns : can(regex("^arn:[a-z-]+:(secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}|ssm:[a-z0-9-]+:[0-9]{12}:parameter/[A-Za-z0-9/_.-]+)$", a))])
    error_message = "credential_secret_arns must hold full Secrets Manager secret ARNs (ending in -XXXXXX) or SSM parameter ARNs (arn:...:ssm:REGION:ACCOUNT:parameter/NAME)."
  }
}

variable "credential_secret_kms_key_arns" {
  description = "ARNs of the customer managed KMS keys that encrypt credential_secret_arns. Empty: AWS managed keys, which need no grant. The role may kms:Decrypt with them only through Secrets Manager or SSM in the secrets' regions."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.credential_secret_kms_key_arns : can(regex("^arn:[a-z-]+:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]+$", a))])
    error_message = "credential_secret_kms_key_arns must hold KMS key ARNs (arn:...:kms:REGION:ACCOUNT:key/ID)."
  }
}

variable "report_foundation_model_arns" {
  description = "With an inference profile as report_model_arn: the foundation-model ARNs it routes to (arn:aws:bedrock:REGION::foundation-model/ID, one per region of a cross-region profile). Bedrock authorises InvokeModel on the profile and on the model in the region that serves the call, so both are granted."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.report_foundation_model_arns : can(regex("^arn:[a-z-]+:bedrock:[a-z0-9-]+::foundation-model/[A-Za-z0-9._:-]+$", a))])
    error_message = "report_foundation_model_arns must hold foundation-model ARNs (arn:...:bedrock:REGION::foundation-model/ID)."
  }
}

variable "report_guardrail_arn" {
  description = "ARN of the Bedrock guardrail of report.guardrail.id; the instance role may bedrock:ApplyGuardrail exactly it. Null grants nothing."
  type        = string
  default     = null

  validation {
    condition     = var.report_guardrail_arn == null ? true : can(regex("^arn:[a-z-]+:bedrock:[a-z0-9-]+:[0-9]{12}:guardrail/[A-Za-z0-9]+$", var.report_guardrail_arn))
    error_message = "report_guardrail_arn must be a Bedrock guardrail ARN (arn:...:bedrock:REGION:ACCOUNT:guardrail/ID)."
  }
}

variable "results_bucket" {
  description = "Name of an existing S3 bucket for the agents' full task outputs (results.s3.bucket in the agent config). The instance role may s3:PutObject exactly under results_prefix in it. Null grants nothing (the upload is off)."
  type        = string
  default     = null

  validation {
    condition     = var.results_bucket == null ? true : can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.results_bucket))
    error_message = "results_bucket must be an S3 bucket name (3 to 63 of a-z, 0-9, '.', '-')."
  }
}

variable "results_prefix" {
  description = "Key prefix of the full outputs in results_bucket (results.s3.prefix), without a leading or trailing slash; objects are PREFIX/YYYY/MM/DD/<task id>.txt. Empty: the whole bucket."
  type        = string
  default     = "autodiag"

  validation {
    condition     = var.results_prefix == "" || can(regex("^[^/](.*[^/])?$", var.results_prefix))
    error_message = "results_prefix must not start or end with a slash."
  }
}

variable "results_kms_key_arn" {
  description = "ARN of the customer managed KMS key the outputs are encrypted with (results.s3.sse aws:kms, results.s3.kms_key_id). When set with results_bucket, the role may kms:GenerateDataKey with it only through S3. Null: SSE-S3 or the bucket default, which needs no grant."
  type        = string
  default     = null

  validation {
    condition     = var.results_kms_key_arn == null ? true : can(regex("^arn:[a-z-]+:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]+$", var.results_kms_key_arn))
    error_message = "results_kms_key_arn must be a KMS key ARN (arn:...:kms:REGION:ACCOUNT:key/ID)."
  }
}

variable "queue_kms_key_arn" {
  description = "ARN of a customer managed KMS key for the task, dead-letter and lifecycle queues (SSE-KMS). Null: SSE-SQS. When set, the agent role and the lifecycle hook role get kms:GenerateDataKey and kms:Decrypt on it through SQS; the key policy must allow them (and whatever sends tasks)."
  type        = string
  default     = null

  validation {
    condition     = var.queue_kms_key_arn == null ? true : can(regex("^arn:[a-z-]+:kms:[a-z0-9-]+:[0-9]{12}:key/[0-9a-f-]+$", var.queue_kms_key_arn))
    error_message = "queue_kms_key_arn must be a KMS key ARN (arn:...:kms:REGION:ACCOUNT:key/ID)."
  }
}

variable "name_prefix" {
  description = "Prefix from which Terraform generates unique IAM role and instance profile names (IAM names are account-wide: use it when the same name is deployed in several regions of one account). Null: fixed names <name>-agent and <name>-lifecycle-hook."
  type        = string
  default     = null

  validation {
    condition     = var.name_prefix == null ? true : can(regex("^[A-Za-z0-9+=,.@_-]{1,23}$", var.name_prefix))
    error_message = "name_prefix must be 1-23 characters valid in IAM names (the longest generated prefix adds \"lifecycle-hook-\" within IAM's 38)."
  }
}

variable "iam_path" {
  description = "Path of the IAM roles and the instance profile."
  type        = string
  default     = "/"

  validation {
    condition     = can(regex("^/([A-Za-z0-9+=,.@_-]+/)*$", var.iam_path)) && length(var.iam_path) <= 512
    error_message = "iam_path must begin and end with / (e.g. /autodiag/)."
  }
}

variable "permissions_boundary" {
  description = "ARN of the managed policy set as permissions boundary on both IAM roles. Null: none."
  type        = string
  default     = null
}

variable "enable_limiter_degraded_alarm" {
  description = "Create an alarm on the LimiterDegraded metric (limiter decisions taken without Redis, under the rule's fail mode)."
  type        = bool
  default     = false
}

variable "limiter_degraded_threshold" {
  description = "The limiter-degraded alarm fires when the sum of LimiterDegraded over 5 minutes exceeds this value."
  type        = number
  default     = 0
}

variable "alarm_sns_topic_arn" {
  description = "SNS topic ARN notified when an alarm fires or recovers. Null means alarms have no actions (visible in the console only)."
  type        = string
  default     = null
}

variable "alarm_topic" {
  description = "Create an SNS topic (<name>-alarms) subscribed to the task queue (raw delivery off), with the queue policy allowing it: CloudWatch alarms whose actions publish to it become the tasks their route makes. For SSE-KMS queues (queue_kms_key_arn) the key policy must also let sns.amazonaws.com use the key."
  type        = bool
  default     = false
}

variable "alarm_topic_kms_key_arn" {
  description = "KMS key that encrypts the alarm topic; null means no encryption at rest (CloudWatch alarms can publish to an encrypted topic only when the key policy lets cloudwatch.amazonaws.com use it)."
  type        = string
  default     = null
}

variable "tags" {
  description = "Tags added to every taggable resource."
  type        = map(string)
  default     = {}
}
