# autodiag: the AWS side of an autodiag fleet. The caller owns the Auto Scaling
# group and its launch template; this module adds the task queues, the
# termination lifecycle hook, the instance role the agent runs under, and the
# alarms that page someone when a drain is stuck in Terminating:Wait.

locals {
  hook_name = coalesce(var.lifecycle_hook_name, "${var.name}-drain")
  use_sqs   = var.lifecycle_source == "sqs"

  # partition, region and account come from the task queue ARN
  # (arn:PARTITION:sqs:REGION:ACCOUNT:NAME): no extra data sources, and no
  # dependence on aws_region attributes that differ between provider 5 and 6.
  arn_parts = split(":", aws_sqs_queue.tasks.arn)
  partition = local.arn_parts[1]
  region    = local.arn_parts[3]
  account   = local.arn_parts[4]

  # IAM cannot name an ASG by name alone: the group id in the ARN is a UUID,
  # hence the "*" in that position. The ARN still matches one group name.
  asg_arn = "arn:${local.partition}:autoscaling:${local.region}:${local.account}:autoScalingGroup:*:autoScalingGroupName/${var.asg_name}"

  alarm_actions = var.alarm_sns_topic_arn == null ? [] : [var.alarm_sns_topic_arn]
}

# ---------------------------------------------------------------------------
# Task queue and dead-letter queue

resource "aws_sqs_queue" "dlq" {
  name                      = "${var.name}-tasks-dlq"
  message_retention_seconds = var.dlq_message_retention_seconds
  sqs_managed_sse_enabled   = true
  tags                      = var.tags
}

resource "aws_sqs_queue" "tasks" {
  name                       = "${var.name}-tasks"
  visibility_timeout_seconds = var.visibility_timeout_seconds
  message_retention_seconds  = var.message_retention_seconds
  receive_wait_time_seconds  = 20
  sqs_managed_sse_enabled    = true

  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = var.max_receive_count
  })

  tags = var.tags
}

# Only the task queue may use the DLQ as its dead-letter target.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  queue_url = aws_sqs_queue.dlq.id

  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.tasks.arn]
  })
}

# ---------------------------------------------------------------------------
# Lifecycle notifications (lifecycle_source = "sqs" only)

resource "aws_sqs_queue" "lifecycle" {
  count = local.use_sqs ? 1 : 0

  name                       = "${var.name}-lifecycle"
  visibility_timeout_seconds = 30
  message_retention_seconds  = 86400
  receive_wait_time_seconds  = 20
  # SSE-SQS (not SSE-KMS with the AWS managed key), so Auto Scaling can publish.
  sqs_managed_sse_enabled = true
  tags                    = var.tags
}

data "aws_iam_policy_document" "hook_assume" {
  count = local.use_sqs ? 1 : 0

  statement {
    sid     = "AutoScalingAssumes"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["autoscaling.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "hook_publish" {
  count = local.use_sqs ? 1 : 0

  statement {
    sid       = "PublishLifecycleNotifications"
    actions   = ["sqs:SendMessage", "sqs:GetQueueUrl"]
    resources = [aws_sqs_queue.lifecycle[0].arn]
  }
}

resource "aws_iam_role" "hook" {
  count = local.use_sqs ? 1 : 0

  name               = "${var.name}-lifecycle-hook"
  description        = "Lets Auto Scaling publish ${local.hook_name} notifications to the autodiag lifecycle queue."
  assume_role_policy = data.aws_iam_policy_document.hook_assume[0].json
  tags               = var.tags
}

resource "aws_iam_role_policy" "hook" {
  count = local.use_sqs ? 1 : 0

  name   = "publish-lifecycle-notifications"
  role   = aws_iam_role.hook[0].id
  policy = data.aws_iam_policy_document.hook_publish[0].json
}

# ---------------------------------------------------------------------------
# Lifecycle hook on the caller's group

resource "aws_autoscaling_lifecycle_hook" "drain" {
  name                   = local.hook_name
  autoscaling_group_name = var.asg_name
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_TERMINATING"
  heartbeat_timeout      = var.heartbeat_timeout
  default_result         = var.default_result

  notification_target_arn = local.use_sqs ? aws_sqs_queue.lifecycle[0].arn : null
  role_arn                = local.use_sqs ? aws_iam_role.hook[0].arn : null

  # The role must be able to publish before the hook is created: Auto Scaling
  # sends a test notification when the hook is put.
  depends_on = [aws_iam_role_policy.hook]
}

# ---------------------------------------------------------------------------
# Instance role: exactly the calls the agent makes, on the resources it needs.
#
# IAM has no separate actions for the batch APIs: DeleteMessageBatch,
# ChangeMessageVisibilityBatch and SendMessageBatch are authorised by
# sqs:DeleteMessage, sqs:ChangeMessageVisibility and sqs:SendMessage.

data "aws_iam_policy_document" "agent_assume" {
  statement {
    sid     = "EC2Assumes"
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "agent_lifecycle_queue" {
  count = local.use_sqs ? 1 : 0

  statement {
    sid = "ConsumeLifecycleNotifications"
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
    ]
    resources = [aws_sqs_queue.lifecycle[0].arn]
  }
}

data "aws_iam_policy_document" "agent" {
  source_policy_documents = data.aws_iam_policy_document.agent_lifecycle_queue[*].json

  statement {
    sid = "ConsumeTasks"
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
      # autodiag enqueue and limiter deferrals put tasks back on the queue.
      "sqs:SendMessage",
    ]
    resources = [aws_sqs_queue.tasks.arn]
  }

  statement {
    sid       = "RejectToDeadLetterQueue"
    actions   = ["sqs:SendMessage"]
    resources = [aws_sqs_queue.dlq.arn]
  }

  statement {
    sid = "CompleteOwnLifecycleActions"
    actions = [
      "autoscaling:RecordLifecycleActionHeartbeat",
      "autoscaling:CompleteLifecycleAction",
    ]
    resources = [local.asg_arn]
  }

  statement {
    # Describe* calls do not support resource-level permissions; read-only.
    sid       = "FindOwnGroup"
    actions   = ["autoscaling:DescribeAutoScalingInstances"]
    resources = ["*"]
  }

  statement {
    # PutMetricData has no resource ARN; the namespace condition is the limit.
    sid       = "PublishDrainMetrics"
    actions   = ["cloudwatch:PutMetricData"]
    resources = ["*"]

    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.metrics_namespace]
    }
  }
}

resource "aws_iam_role" "agent" {
  name = "${var.name}-agent"
  # No reference to var.asg_name here: the caller's launch template needs the
  # instance profile before the group (and its name) exists.
  description        = "autodiag agent instance role."
  assume_role_policy = data.aws_iam_policy_document.agent_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy" "agent" {
  name   = "autodiag-agent"
  role   = aws_iam_role.agent.id
  policy = data.aws_iam_policy_document.agent.json
}

resource "aws_iam_instance_profile" "agent" {
  name = "${var.name}-agent"
  role = aws_iam_role.agent.name
  tags = var.tags
}

# ---------------------------------------------------------------------------
# Alarms

resource "aws_cloudwatch_metric_alarm" "drain_stuck" {
  alarm_name        = "${var.name}-drain-stuck"
  alarm_description = "An autodiag agent in ${var.asg_name} has been draining for more than ${var.drain_stuck_minutes} minutes (instance held in Terminating:Wait). Runbook: README.md#stuck-drain."

  namespace   = var.metrics_namespace
  metric_name = "DrainSeconds"
  dimensions = {
    AutoScalingGroupName = var.asg_name
  }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.drain_stuck_minutes * 60
  # The metric exists only while an agent drains.
  treat_missing_data = "notBreaching"

  alarm_actions = local.alarm_actions
  ok_actions    = local.alarm_actions
  tags          = var.tags
}

resource "aws_cloudwatch_metric_alarm" "dlq_not_empty" {
  alarm_name        = "${var.name}-dlq-not-empty"
  alarm_description = "Tasks reached ${aws_sqs_queue.dlq.name}: rejected by an agent (reason in the message attributes) or received ${var.max_receive_count} times without completing."

  namespace   = "AWS/SQS"
  metric_name = "ApproximateNumberOfMessagesVisible"
  dimensions = {
    QueueName = aws_sqs_queue.dlq.name
  }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  treat_missing_data  = "notBreaching"

  alarm_actions = local.alarm_actions
  ok_actions    = local.alarm_actions
  tags          = var.tags
}

resource "aws_cloudwatch_metric_alarm" "limiter_degraded" {
  count = var.enable_limiter_degraded_alarm ? 1 : 0

  alarm_name        = "${var.name}-limiter-degraded"
  alarm_description = "autodiag agents in ${var.asg_name} decided limits without Redis (rule fail mode applied)."

  namespace   = var.metrics_namespace
  metric_name = "LimiterDegraded"
  dimensions = {
    AutoScalingGroupName = var.asg_name
  }
  statistic           = "Sum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.limiter_degraded_threshold
  treat_missing_data  = "notBreaching"

  alarm_actions = local.alarm_actions
  ok_actions    = local.alarm_actions
  tags          = var.tags
}
