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
  description = "The drain-stuck alarm fires when the maximum DrainSeconds of the group exceeds this many minutes. Keep it at or above the agent's lifecycle.drain_timeout."
  type        = number
  default     = 10

  validation {
    condition     = var.drain_stuck_minutes > 0
    error_message = "drain_stuck_minutes must be positive."
  }
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

variable "tags" {
  description = "Tags added to every taggable resource."
  type        = map(string)
  default     = {}
}
