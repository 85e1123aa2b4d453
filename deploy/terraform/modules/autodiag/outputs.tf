output "task_queue_url" {
  description = "URL of the task queue; queue.url in the agent config."
  value       = aws_sqs_queue.tasks.url
}

output "task_queue_arn" {
  description = "ARN of the task queue, for granting sqs:SendMessage to the alert router."
  value       = aws_sqs_queue.tasks.arn
}

output "dlq_url" {
  description = "URL of the dead-letter queue; queue.dlq_url in the agent config."
  value       = aws_sqs_queue.dlq.url
}

output "dlq_arn" {
  description = "ARN of the dead-letter queue."
  value       = aws_sqs_queue.dlq.arn
}

output "lifecycle_queue_url" {
  description = "URL of the lifecycle notification queue (lifecycle.queue_url); null when lifecycle_source is imds."
  value       = one(aws_sqs_queue.lifecycle[*].url)
}

output "lifecycle_queue_arn" {
  description = "ARN of the lifecycle notification queue; null when lifecycle_source is imds."
  value       = one(aws_sqs_queue.lifecycle[*].arn)
}

output "lifecycle_sources" {
  description = "Value for lifecycle.sources in the agent config: signal plus the chosen source."
  value       = tolist(["signal", var.lifecycle_source])
}

output "lifecycle_hook_name" {
  description = "Name of the termination lifecycle hook; lifecycle.hook_name in the agent config."
  # Not the resource attribute: the hook needs the group, which needs a launch
  # template rendered with this value.
  value = local.hook_name
}

output "launch_hook_name" {
  description = "Name of the launch lifecycle hook, lifecycle.launch_hook_name in the agent config; null without launch_hook."
  value       = var.launch_hook ? local.launch_hook_name : null
}

output "heartbeat_timeout" {
  description = "Heartbeat timeout of the hook in seconds; lifecycle.hook_heartbeat_timeout in the agent config."
  value       = var.heartbeat_timeout
}

output "instance_role_name" {
  description = "Name of the agent's instance role, to attach further policies the caller's own software needs."
  value       = aws_iam_role.agent.name
}

output "instance_role_arn" {
  description = "ARN of the agent's instance role."
  value       = aws_iam_role.agent.arn
}

output "instance_profile_name" {
  description = "Instance profile for the launch template."
  value       = aws_iam_instance_profile.agent.name
  # A launch template that names the profile waits for the role's policy:
  # an instance never boots with a role that cannot yet read its queue.
  depends_on = [aws_iam_role_policy.agent]
}

output "instance_profile_arn" {
  description = "ARN of the instance profile for the launch template."
  value       = aws_iam_instance_profile.agent.arn
  # A launch template that names the profile waits for the role's policy:
  # an instance never boots with a role that cannot yet read its queue.
  depends_on = [aws_iam_role_policy.agent]
}

output "metrics_namespace" {
  description = "CloudWatch namespace the agent may publish to; cloudwatch.namespace in the agent config."
  value       = var.metrics_namespace
}

output "agent_policy_json" {
  description = "The instance role's policy document, for review."
  value       = data.aws_iam_policy_document.agent.json
}

output "alarm_arns" {
  description = "ARNs of the alarms, by name: drain_stuck, terminating_stuck, dlq_not_empty, task_queue_age, and when created lifecycle_queue_age and limiter_degraded."
  value = merge(
    {
      drain_stuck       = aws_cloudwatch_metric_alarm.drain_stuck.arn
      terminating_stuck = aws_cloudwatch_metric_alarm.terminating_stuck.arn
      dlq_not_empty     = aws_cloudwatch_metric_alarm.dlq_not_empty.arn
      task_queue_age    = aws_cloudwatch_metric_alarm.task_queue_age.arn
    },
    { for a in aws_cloudwatch_metric_alarm.lifecycle_queue_age : "lifecycle_queue_age" => a.arn },
    { for a in aws_cloudwatch_metric_alarm.limiter_degraded : "limiter_degraded" => a.arn },
  )
}

output "group_metrics" {
  description = "Group metrics the caller's Auto Scaling group must publish (enabled_metrics, 1Minute granularity) for the terminating-stuck alarm."
  value       = ["GroupTerminatingInstances"]
}

output "alarm_topic_arn" {
  description = "ARN of the alarm topic subscribed to the task queue: the alarm_actions of CloudWatch alarms that should run diagnostics; null unless alarm_topic."
  value       = one(aws_sns_topic.alarms[*].arn)
}

output "results_objects_arn" {
  description = "ARN pattern of the full task outputs the instance role may s3:PutObject (results_bucket/results_prefix/*); null when results_bucket is not set."
  value       = local.results_objects_arn
}

output "lifecycle_hooks" {
  description = "The lifecycle hooks as initial_lifecycle_hook blocks of the caller's aws_autoscaling_group (create_lifecycle_hooks = false): a hook in the group exists before its first instance launches."
  value = concat(
    [{
      name                    = local.hook_name
      lifecycle_transition    = "autoscaling:EC2_INSTANCE_TERMINATING"
      heartbeat_timeout       = var.heartbeat_timeout
      default_result          = var.default_result
      notification_target_arn = local.use_sqs ? aws_sqs_queue.lifecycle[0].arn : null
      role_arn                = local.use_sqs ? aws_iam_role.hook[0].arn : null
    }],
    var.launch_hook ? [{
      name                    = local.launch_hook_name
      lifecycle_transition    = "autoscaling:EC2_INSTANCE_LAUNCHING"
      heartbeat_timeout       = var.launch_heartbeat_timeout
      default_result          = "ABANDON"
      notification_target_arn = null
      role_arn                = null
    }] : [],
  )
  # Auto Scaling sends a test notification when a hook is put: the hook
  # role must be able to publish first.
  depends_on = [aws_iam_role_policy.hook]
}

output "credential_secret_arns" {
  description = "The credential secrets the instance role may read (credential_secret_arns)."
  value       = var.credential_secret_arns
}
