# autodiag: the AWS side of an autodiag fleet. The caller owns the Auto Scaling
# group and its launch template; this module adds the task queues, the
# termination lifecycle hook, the instance role the agent runs under, and the
# alarms that page someone when a drain is stuck in Terminating:Wait or no
# agent consumes.

locals {
  hook_name        = coalesce(var.lifecycle_hook_name, "${var.name}-drain")
  launch_hook_name = coalesce(var.launch_hook_name, "${var.name}-launch")
  use_sqs          = var.lifecycle_source == "sqs"

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

  # IAM names are account-wide: with name_prefix Terraform generates unique
  # ones, so the same name can be deployed in several regions.
  agent_role_name   = var.name_prefix == null ? "${var.name}-agent" : null
  agent_role_prefix = var.name_prefix == null ? null : "${var.name_prefix}agent-"
  hook_role_name    = var.name_prefix == null ? "${var.name}-lifecycle-hook" : null
  hook_role_prefix  = var.name_prefix == null ? null : "${var.name_prefix}lifecycle-hook-"

  # The Redis URL secret: Secrets Manager (GetSecretValue) or SSM Parameter
  # Store (GetParameter), told apart by the service in its ARN
  # (arn:PARTITION:SERVICE:REGION:ACCOUNT:...). Its CMK is usable only
  # through that service in that region.
  secret_parts   = var.redis_url_secret_arn == null ? [] : split(":", var.redis_url_secret_arn)
  secret_service = length(local.secret_parts) > 2 ? local.secret_parts[2] : ""
  secret_via     = length(local.secret_parts) > 3 ? "${local.secret_parts[2]}.${local.secret_parts[3]}.amazonaws.com" : ""

  # Every queue the module creates, for the TLS-only queue policies.
  queues = merge(
    {
      tasks = { arn = aws_sqs_queue.tasks.arn, url = aws_sqs_queue.tasks.id }
      dlq   = { arn = aws_sqs_queue.dlq.arn, url = aws_sqs_queue.dlq.id }
    },
    { for q in aws_sqs_queue.lifecycle : "lifecycle" => { arn = q.arn, url = q.id } },
  )

  # The full task outputs: PutObject under exactly the configured prefix.
  results_objects_arn = var.results_bucket == null ? null : "arn:${local.partition}:s3:::${var.results_bucket}/${var.results_prefix == "" ? "" : "${var.results_prefix}/"}*"

  terminating_stuck_minutes = coalesce(var.terminating_stuck_minutes, var.drain_stuck_minutes + 5)

  alarm_actions = var.alarm_sns_topic_arn == null ? [] : [var.alarm_sns_topic_arn]

  # The other credential secrets, by service; KMS only through the services
  # (and regions) that hold them.
  credential_sm  = [for a in var.credential_secret_arns : a if split(":", a)[2] == "secretsmanager"]
  credential_ssm = [for a in var.credential_secret_arns : a if split(":", a)[2] == "ssm"]
  credential_via = distinct([for a in var.credential_secret_arns : "${split(":", a)[2]}.${split(":", a)[3]}.amazonaws.com"])

  # An inference profile routes to foundation models that need their own
  # grant; a profile without them would fail every report with AccessDenied.
  report_model_is_profile = var.report_model_arn == null ? false : can(regex(":(application-)?inference-profile/", var.report_model_arn))
}

# ---------------------------------------------------------------------------
# Task queue and dead-letter queue

resource "aws_sqs_queue" "dlq" {
  name                      = "${var.name}-tasks-dlq"
  message_retention_seconds = var.dlq_message_retention_seconds
  sqs_managed_sse_enabled   = var.queue_kms_key_arn == null ? true : null
  kms_master_key_id         = var.queue_kms_key_arn
  tags                      = var.tags
}

resource "aws_sqs_queue" "tasks" {
  name                       = "${var.name}-tasks"
  visibility_timeout_seconds = var.visibility_timeout_seconds
  message_retention_seconds  = var.message_retention_seconds
  receive_wait_time_seconds  = 20
  sqs_managed_sse_enabled    = var.queue_kms_key_arn == null ? true : null
  kms_master_key_id          = var.queue_kms_key_arn

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

# Every queue refuses requests that do not use TLS; the task queue also
# takes the alarm topic's deliveries when there is one.
data "aws_iam_policy_document" "queue_tls_only" {
  for_each = local.queues

  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["sqs:*"]
    resources = [each.value.arn]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  # With alarm_topic: the topic, and nothing else through SNS, may send
  # CloudWatch alarm notifications to the task queue.
  dynamic "statement" {
    for_each = each.key == "tasks" ? aws_sns_topic.alarms : []

    content {
      sid       = "AllowAlarmTopic"
      effect    = "Allow"
      actions   = ["sqs:SendMessage"]
      resources = [each.value.arn]

      principals {
        type        = "Service"
        identifiers = ["sns.amazonaws.com"]
      }

      condition {
        test     = "ArnEquals"
        variable = "aws:SourceArn"
        values   = [statement.value.arn]
      }
    }
  }
}

resource "aws_sqs_queue_policy" "tls_only" {
  for_each = local.queues

  queue_url = each.value.url
  policy    = data.aws_iam_policy_document.queue_tls_only[each.key].json
}

# ---------------------------------------------------------------------------
# Alarm topic (alarm_topic = true only): CloudWatch alarms whose actions
# publish here reach the task queue in the SNS envelope, which the agent
# recognises and routes (docs/alerting.md, "CloudWatch alarms"). Raw delivery stays
# off: the envelope tells an alarm from a task.

resource "aws_sns_topic" "alarms" {
  count = var.alarm_topic ? 1 : 0

  name              = "${var.name}-alarms"
  kms_master_key_id = var.alarm_topic_kms_key_arn
  tags              = var.tags
}

resource "aws_sns_topic_subscription" "alarms_to_tasks" {
  count = var.alarm_topic ? 1 : 0

  topic_arn            = aws_sns_topic.alarms[0].arn
  protocol             = "sqs"
  endpoint             = aws_sqs_queue.tasks.arn
  raw_message_delivery = false

  # The queue policy must allow the topic before SNS confirms the
  # subscription's first delivery.
  depends_on = [aws_sqs_queue_policy.tls_only]
}

# ---------------------------------------------------------------------------
# Lifecycle notifications (lifecycle_source = "sqs" only)

resource "aws_sqs_queue" "lifecycle" {
  count = local.use_sqs ? 1 : 0

  name                       = "${var.name}-lifecycle"
  visibility_timeout_seconds = 30
  message_retention_seconds  = 86400
  receive_wait_time_seconds  = 20
  # SSE-SQS, or a customer managed key the hook role may use: not the AWS
  # managed aws/sqs key, whose policy no role of Auto Scaling's can be granted.
  sqs_managed_sse_enabled = var.queue_kms_key_arn == null ? true : null
  kms_master_key_id       = var.queue_kms_key_arn
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

    # Only Auto Scaling acting for this account may assume it (confused
    # deputy).
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account]
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

  # Sending to an SSE-KMS queue needs a data key, and the key checked.
  dynamic "statement" {
    for_each = var.queue_kms_key_arn == null ? [] : [var.queue_kms_key_arn]
    content {
      sid       = "EncryptLifecycleNotifications"
      actions   = ["kms:GenerateDataKey", "kms:Decrypt"]
      resources = [var.queue_kms_key_arn]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["sqs.${local.region}.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role" "hook" {
  count = local.use_sqs ? 1 : 0

  name                 = local.hook_role_name
  name_prefix          = local.hook_role_prefix
  path                 = var.iam_path
  permissions_boundary = var.permissions_boundary
  description          = "Lets Auto Scaling publish ${local.hook_name} notifications to the autodiag lifecycle queue."
  assume_role_policy   = data.aws_iam_policy_document.hook_assume[0].json
  tags                 = var.tags
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
  count = var.create_lifecycle_hooks ? 1 : 0

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

# The drain hook gained a count (create_lifecycle_hooks): existing state
# moves to its only instance instead of being destroyed and created again.
moved {
  from = aws_autoscaling_lifecycle_hook.drain
  to   = aws_autoscaling_lifecycle_hook.drain[0]
}

# Optional launch hook: the agent completes it (by instance id, CONTINUE) once
# its readiness checks pass, and with ABANDON when they still fail at
# lifecycle.launch_timeout. No notification target: the agent knows its own
# launch. An agent that never starts lets the hook time out with ABANDON, so
# the instance is replaced instead of put in service unable to work. The
# agent's existing grants on the group cover it (CompleteOwnLifecycleActions).
resource "aws_autoscaling_lifecycle_hook" "launch" {
  count = var.create_lifecycle_hooks && var.launch_hook ? 1 : 0

  name                   = local.launch_hook_name
  autoscaling_group_name = var.asg_name
  lifecycle_transition   = "autoscaling:EC2_INSTANCE_LAUNCHING"
  heartbeat_timeout      = var.launch_heartbeat_timeout
  default_result         = "ABANDON"
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
    # Others' notifications are made visible again, ours is kept invisible
    # while draining and deleted once the action is completed.
    sid = "ConsumeLifecycleNotifications"
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
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
      # The redrive policy's maxReceiveCount, so deferrals never dead-letter.
      "sqs:GetQueueAttributes",
      # POST /v1/tasks, and deferrals re-sent as new messages.
      "sqs:SendMessage",
    ]
    resources = [aws_sqs_queue.tasks.arn]
  }

  statement {
    # Rejected tasks, with the reason; MaximumMessageSize bounds what fits.
    sid       = "RejectToDeadLetterQueue"
    actions   = ["sqs:SendMessage", "sqs:GetQueueAttributes"]
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
    # DescribeAutoScalingInstances finds the group when lifecycle.asg_name is
    # empty; DescribeLifecycleHooks reads the hook's heartbeat timeout when
    # lifecycle.hook_heartbeat_timeout is unset.
    sid = "FindOwnGroupAndHook"
    actions = [
      "autoscaling:DescribeAutoScalingInstances",
      "autoscaling:DescribeLifecycleHooks",
    ]
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

  # redis.url_secret: the agent reads the Redis URL at start, so it is in
  # neither user data nor Terraform state.
  dynamic "statement" {
    for_each = local.secret_service == "secretsmanager" ? [var.redis_url_secret_arn] : []
    content {
      sid       = "ReadRedisURLSecret"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = [var.redis_url_secret_arn]
    }
  }

  dynamic "statement" {
    for_each = local.secret_service == "ssm" ? [var.redis_url_secret_arn] : []
    content {
      sid       = "ReadRedisURLParameter"
      actions   = ["ssm:GetParameter"]
      resources = [var.redis_url_secret_arn]
    }
  }

  dynamic "statement" {
    for_each = var.redis_url_secret_arn != null && var.redis_url_secret_kms_key_arn != null ? [var.redis_url_secret_kms_key_arn] : []
    content {
      sid       = "DecryptRedisURLSecret"
      actions   = ["kms:Decrypt"]
      resources = [var.redis_url_secret_kms_key_arn]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = [local.secret_via]
      }
    }
  }

  # The other *_secret credentials: read at start and at every refresh.
  dynamic "statement" {
    for_each = length(local.credential_sm) > 0 ? [1] : []
    content {
      sid       = "ReadCredentialSecrets"
      actions   = ["secretsmanager:GetSecretValue"]
      resources = local.credential_sm
    }
  }

  dynamic "statement" {
    for_each = length(local.credential_ssm) > 0 ? [1] : []
    content {
      sid       = "ReadCredentialParameters"
      actions   = ["ssm:GetParameter"]
      resources = local.credential_ssm
    }
  }

  dynamic "statement" {
    for_each = length(var.credential_secret_kms_key_arns) > 0 && length(var.credential_secret_arns) > 0 ? [1] : []
    content {
      sid       = "DecryptCredentialSecrets"
      actions   = ["kms:Decrypt"]
      resources = var.credential_secret_kms_key_arns

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = local.credential_via
      }
    }
  }

  # report.provider bedrock: Converse on exactly the configured model (with
  # an inference profile, also on the foundation models it routes to), and
  # its guardrail when report.guardrail is set.
  dynamic "statement" {
    for_each = var.report_model_arn == null ? [] : [var.report_model_arn]
    content {
      sid       = "InvokeReportModel"
      actions   = ["bedrock:InvokeModel"]
      resources = concat([var.report_model_arn], var.report_foundation_model_arns)
    }
  }

  dynamic "statement" {
    for_each = var.report_guardrail_arn == null ? [] : [var.report_guardrail_arn]
    content {
      sid       = "ApplyReportGuardrail"
      actions   = ["bedrock:ApplyGuardrail"]
      resources = [var.report_guardrail_arn]
    }
  }

  # results.s3: the full output of each task, one object per task.
  dynamic "statement" {
    for_each = local.results_objects_arn == null ? [] : [local.results_objects_arn]
    content {
      sid       = "PutTaskOutputs"
      actions   = ["s3:PutObject"]
      resources = [local.results_objects_arn]
    }
  }

  dynamic "statement" {
    for_each = var.results_bucket != null && var.results_kms_key_arn != null ? [var.results_kms_key_arn] : []
    content {
      # SSE-KMS PutObject asks KMS for a data key through S3.
      sid       = "EncryptTaskOutputs"
      actions   = ["kms:GenerateDataKey"]
      resources = [var.results_kms_key_arn]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["s3.${local.region}.amazonaws.com"]
      }
    }
  }

  dynamic "statement" {
    for_each = var.queue_kms_key_arn == null ? [] : [var.queue_kms_key_arn]
    content {
      # Receiving decrypts; sending (deferrals, rejections) needs a data key.
      sid       = "UseQueueKey"
      actions   = ["kms:GenerateDataKey", "kms:Decrypt"]
      resources = [var.queue_kms_key_arn]

      condition {
        test     = "StringEquals"
        variable = "kms:ViaService"
        values   = ["sqs.${local.region}.amazonaws.com"]
      }
    }
  }
}

resource "aws_iam_role" "agent" {
  name                 = local.agent_role_name
  name_prefix          = local.agent_role_prefix
  path                 = var.iam_path
  permissions_boundary = var.permissions_boundary
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

  lifecycle {
    precondition {
      condition     = !local.report_model_is_profile || length(var.report_foundation_model_arns) > 0
      error_message = "report_model_arn is an inference profile: list the foundation-model ARNs it routes to in report_foundation_model_arns, or every report fails with AccessDenied."
    }
  }
}

resource "aws_iam_instance_profile" "agent" {
  name        = local.agent_role_name
  name_prefix = local.agent_role_prefix
  path        = var.iam_path
  role        = aws_iam_role.agent.name
  tags        = var.tags
}

# ---------------------------------------------------------------------------
# Alarms

# Two alarms on a stuck drain. drain_stuck needs a live agent (it publishes
# DrainSeconds from the drain's start, every minute, until the lifecycle action
# is completed); terminating_stuck needs none (Auto Scaling's own group
# metric), so it also catches a dead agent or one that lost its action.

resource "aws_cloudwatch_metric_alarm" "drain_stuck" {
  alarm_name        = "${var.name}-drain-stuck"
  alarm_description = "An autodiag agent in ${var.asg_name} has been draining, or failing to complete its lifecycle action, for more than ${var.drain_stuck_minutes} minutes (instance held in Terminating:Wait). Runbook: docs/operations.md#stuck-drain."

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
  # The metric exists only while an agent drains or completes.
  treat_missing_data = "notBreaching"

  alarm_actions = local.alarm_actions
  ok_actions    = local.alarm_actions
  tags          = var.tags
}

resource "aws_cloudwatch_metric_alarm" "terminating_stuck" {
  alarm_name        = "${var.name}-terminating-stuck"
  alarm_description = "${var.asg_name} has had an instance in a Terminating state for ${local.terminating_stuck_minutes} consecutive minutes: a drain or its completion is stuck, or the agent is gone. INSUFFICIENT_DATA: the group does not publish GroupTerminatingInstances (enabled_metrics). Runbook: docs/operations.md#stuck-drain."

  namespace   = "AWS/AutoScaling"
  metric_name = "GroupTerminatingInstances"
  dimensions = {
    AutoScalingGroupName = var.asg_name
  }
  # Minimum: one minute with nothing terminating (between the batches of an
  # instance refresh, say) breaks the run.
  statistic           = "Minimum"
  period              = 60
  evaluation_periods  = local.terminating_stuck_minutes
  datapoints_to_alarm = local.terminating_stuck_minutes
  comparison_operator = "GreaterThanThreshold"
  threshold           = 0
  # A group with the metric enabled reports 0 every minute; no data means it
  # is not enabled, which must show rather than read as OK.
  treat_missing_data = "missing"

  alarm_actions = local.alarm_actions
  ok_actions    = local.alarm_actions
  tags          = var.tags
}

# ---------------------------------------------------------------------------
# An absent fleet: nothing else notices when no agent consumes.

resource "aws_cloudwatch_metric_alarm" "task_queue_age" {
  alarm_name        = "${var.name}-task-queue-age"
  alarm_description = "The oldest task on ${aws_sqs_queue.tasks.name} has waited more than ${var.task_queue_age_alarm_seconds} s: no autodiag agent consumes (fleet at zero, agents stopped or failing), or deferrals outlast it."

  namespace   = "AWS/SQS"
  metric_name = "ApproximateAgeOfOldestMessage"
  dimensions = {
    QueueName = aws_sqs_queue.tasks.name
  }
  statistic           = "Maximum"
  period              = 300
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = var.task_queue_age_alarm_seconds
  # SQS stops reporting a queue that has been empty and unused for hours.
  treat_missing_data = "notBreaching"

  alarm_actions = local.alarm_actions
  ok_actions    = local.alarm_actions
  tags          = var.tags
}

resource "aws_cloudwatch_metric_alarm" "lifecycle_queue_age" {
  count = local.use_sqs ? 1 : 0

  alarm_name        = "${var.name}-lifecycle-queue-age"
  alarm_description = "A lifecycle notification on ${aws_sqs_queue.lifecycle[0].name} has waited more than ${coalesce(var.lifecycle_queue_age_alarm_seconds, local.terminating_stuck_minutes * 60)} s: no autodiag agent reads the queue, so terminations wait for the hook's heartbeat timeout."

  namespace   = "AWS/SQS"
  metric_name = "ApproximateAgeOfOldestMessage"
  dimensions = {
    QueueName = aws_sqs_queue.lifecycle[0].name
  }
  statistic           = "Maximum"
  period              = 60
  evaluation_periods  = 1
  comparison_operator = "GreaterThanThreshold"
  threshold           = coalesce(var.lifecycle_queue_age_alarm_seconds, local.terminating_stuck_minutes * 60)
  treat_missing_data  = "notBreaching"

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
