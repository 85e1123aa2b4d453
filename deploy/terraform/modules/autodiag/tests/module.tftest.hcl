# terraform test, offline: the AWS provider is mocked, so this checks the
# module's wiring (counts, arguments, derived ARNs), not AWS itself. The IAM
# statements are checked by deploy/deploy_test.go on the HCL source.

mock_provider "aws" {
  mock_resource "aws_sqs_queue" {
    defaults = {
      arn = "arn:aws:sqs:eu-west-1:123456789012:autodiag-tasks"
      url = "https://sqs.eu-west-1.amazonaws.com/123456789012/autodiag-tasks"
    }
  }

  mock_resource "aws_sns_topic" {
    defaults = {
      arn = "arn:aws:sns:eu-west-1:123456789012:autodiag-alarms"
    }
  }

  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::123456789012:role/autodiag"
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
}

variables {
  name     = "autodiag"
  asg_name = "fleet"
}

run "imds_source_has_no_notification_queue" {
  command = apply

  assert {
    condition     = length(aws_sqs_queue.lifecycle) == 0 && length(aws_iam_role.hook) == 0
    error_message = "the imds source must create neither the lifecycle queue nor the hook role"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain[0].notification_target_arn == null && aws_autoscaling_lifecycle_hook.drain[0].role_arn == null
    error_message = "the imds hook must have no notification target"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain[0].lifecycle_transition == "autoscaling:EC2_INSTANCE_TERMINATING"
    error_message = "the hook must fire on termination"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain[0].name == "autodiag-drain" && output.lifecycle_hook_name == "autodiag-drain"
    error_message = "default hook name is <name>-drain"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain[0].autoscaling_group_name == "fleet"
    error_message = "the hook must attach to asg_name"
  }
  assert {
    condition     = jsondecode(aws_sqs_queue.tasks.redrive_policy).maxReceiveCount == 5
    error_message = "redrive maxReceiveCount must follow max_receive_count"
  }
  assert {
    condition     = local.asg_arn == "arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:*:autoScalingGroupName/fleet"
    error_message = "the lifecycle grants must be limited to the group's ARN"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.drain_stuck.threshold == 660 && aws_cloudwatch_metric_alarm.drain_stuck.statistic == "Maximum"
    error_message = "drain-stuck alarm: Maximum DrainSeconds above 11 minutes by default"
  }
  assert {
    condition = (
      aws_cloudwatch_metric_alarm.terminating_stuck.namespace == "AWS/AutoScaling" &&
      aws_cloudwatch_metric_alarm.terminating_stuck.metric_name == "GroupTerminatingInstances" &&
      aws_cloudwatch_metric_alarm.terminating_stuck.dimensions["AutoScalingGroupName"] == "fleet" &&
      aws_cloudwatch_metric_alarm.terminating_stuck.period == 60 &&
      aws_cloudwatch_metric_alarm.terminating_stuck.evaluation_periods == 16 &&
      aws_cloudwatch_metric_alarm.terminating_stuck.datapoints_to_alarm == 16 &&
      aws_cloudwatch_metric_alarm.terminating_stuck.comparison_operator == "GreaterThanThreshold" &&
      aws_cloudwatch_metric_alarm.terminating_stuck.threshold == 0
    )
    error_message = "terminating-stuck alarm: GroupTerminatingInstances > 0 for drain_stuck_minutes + 5 consecutive minutes by default"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.task_queue_age.metric_name == "ApproximateAgeOfOldestMessage" && aws_cloudwatch_metric_alarm.task_queue_age.threshold == 3600 && length(aws_cloudwatch_metric_alarm.lifecycle_queue_age) == 0
    error_message = "task queue age alarm at 1h by default; no lifecycle queue alarm without the sqs source"
  }
  assert {
    condition     = length(aws_sqs_queue_policy.tls_only) == 2 && contains(keys(aws_sqs_queue_policy.tls_only), "tasks") && contains(keys(aws_sqs_queue_policy.tls_only), "dlq")
    error_message = "both task queues get the TLS-only policy"
  }
  assert {
    condition     = aws_sqs_queue.tasks.sqs_managed_sse_enabled && aws_sqs_queue.tasks.kms_master_key_id == null
    error_message = "SSE-SQS without queue_kms_key_arn"
  }
  assert {
    condition     = aws_iam_role.agent.name == "autodiag-agent" && aws_iam_role.agent.path == "/" && aws_iam_role.agent.permissions_boundary == null
    error_message = "fixed role name, root path and no boundary by default"
  }
  assert {
    condition     = local.secret_service == "" && jsonencode(output.group_metrics) == jsonencode(["GroupTerminatingInstances"])
    error_message = "no secret grant without redis_url_secret_arn"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.drain_stuck.treat_missing_data == "notBreaching" && aws_cloudwatch_metric_alarm.drain_stuck.dimensions["AutoScalingGroupName"] == "fleet"
    error_message = "drain-stuck alarm: per group, OK when no agent drains"
  }
  assert {
    condition     = length(aws_cloudwatch_metric_alarm.limiter_degraded) == 0 && length(aws_cloudwatch_metric_alarm.drain_stuck.alarm_actions) == 0
    error_message = "limiter alarm and alarm actions are opt-in"
  }
  assert {
    condition     = output.lifecycle_sources == tolist(["signal", "imds"]) && output.lifecycle_queue_url == null
    error_message = "outputs for the agent config"
  }
}

run "alarm_topic_subscribed_to_the_task_queue" {
  command = apply

  variables {
    alarm_topic = true
  }

  assert {
    condition     = length(aws_sns_topic.alarms) == 1 && aws_sns_topic.alarms[0].name == "autodiag-alarms"
    error_message = "alarm_topic must create the <name>-alarms topic"
  }
  assert {
    condition = (aws_sns_topic_subscription.alarms_to_tasks[0].protocol == "sqs" &&
      aws_sns_topic_subscription.alarms_to_tasks[0].endpoint == aws_sqs_queue.tasks.arn &&
    aws_sns_topic_subscription.alarms_to_tasks[0].topic_arn == aws_sns_topic.alarms[0].arn)
    error_message = "the alarm topic must be subscribed to the task queue"
  }
  assert {
    condition     = aws_sns_topic_subscription.alarms_to_tasks[0].raw_message_delivery == false
    error_message = "raw delivery must stay off: the SNS envelope tells an alarm from a task"
  }
  assert {
    condition     = output.alarm_topic_arn == aws_sns_topic.alarms[0].arn
    error_message = "alarm_topic_arn must name the topic"
  }
}

run "no_alarm_topic_by_default" {
  command = plan

  assert {
    condition     = length(aws_sns_topic.alarms) == 0 && length(aws_sns_topic_subscription.alarms_to_tasks) == 0
    error_message = "without alarm_topic no topic or subscription exists"
  }
}

run "sqs_source_creates_queue_and_hook_role" {
  command = apply

  variables {
    lifecycle_source              = "sqs"
    lifecycle_hook_name           = "drain-me"
    max_receive_count             = 3
    drain_stuck_minutes           = 15
    enable_limiter_degraded_alarm = true
    alarm_sns_topic_arn           = "arn:aws:sns:eu-west-1:123456789012:oncall"
  }

  assert {
    condition     = length(aws_sqs_queue.lifecycle) == 1 && length(aws_iam_role.hook) == 1 && length(aws_iam_role_policy.hook) == 1
    error_message = "the sqs source needs the lifecycle queue and the hook role"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain[0].notification_target_arn == aws_sqs_queue.lifecycle[0].arn && aws_autoscaling_lifecycle_hook.drain[0].role_arn == aws_iam_role.hook[0].arn
    error_message = "the hook must publish to the lifecycle queue with the hook role"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain[0].name == "drain-me"
    error_message = "lifecycle_hook_name must override the default"
  }
  assert {
    condition     = jsondecode(aws_sqs_queue.tasks.redrive_policy).maxReceiveCount == 3
    error_message = "redrive maxReceiveCount must follow max_receive_count"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.drain_stuck.threshold == 900 && aws_cloudwatch_metric_alarm.terminating_stuck.evaluation_periods == 20
    error_message = "drain_stuck_minutes is in minutes; the terminating alarm follows it"
  }
  assert {
    condition     = length(aws_cloudwatch_metric_alarm.lifecycle_queue_age) == 1 && aws_cloudwatch_metric_alarm.lifecycle_queue_age[0].threshold == 1200
    error_message = "the sqs source gets a lifecycle queue age alarm at terminating_stuck_minutes by default"
  }
  assert {
    condition     = length(aws_sqs_queue_policy.tls_only) == 3 && contains(keys(aws_sqs_queue_policy.tls_only), "lifecycle")
    error_message = "the lifecycle queue gets the TLS-only policy too"
  }
  assert {
    condition     = length(output.alarm_arns) == 6
    error_message = "alarm_arns lists every alarm created"
  }
  assert {
    condition     = length(aws_cloudwatch_metric_alarm.limiter_degraded) == 1 && contains(aws_cloudwatch_metric_alarm.dlq_not_empty.alarm_actions, "arn:aws:sns:eu-west-1:123456789012:oncall")
    error_message = "limiter alarm enabled; alarms notify the SNS topic"
  }
  assert {
    condition     = output.lifecycle_sources == tolist(["signal", "sqs"]) && output.lifecycle_queue_url != null
    error_message = "outputs for the agent config"
  }
}

run "secrets_manager_secret_and_keys" {
  command = apply

  variables {
    redis_url_secret_arn         = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/redis-AbC123"
    redis_url_secret_kms_key_arn = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    queue_kms_key_arn            = "arn:aws:kms:eu-west-1:123456789012:key/abcd1234-12ab-34cd-56ef-1234567890ab"
    terminating_stuck_minutes    = 30
    task_queue_age_alarm_seconds = 600
    name_prefix                  = "autodiag-euw1-"
    iam_path                     = "/autodiag/"
    permissions_boundary         = "arn:aws:iam::123456789012:policy/boundary"
  }

  assert {
    condition     = local.secret_service == "secretsmanager" && local.secret_via == "secretsmanager.eu-west-1.amazonaws.com"
    error_message = "a Secrets Manager ARN selects GetSecretValue and its KMS via-service"
  }
  assert {
    condition     = aws_sqs_queue.tasks.kms_master_key_id == var.queue_kms_key_arn && aws_sqs_queue.dlq.kms_master_key_id == var.queue_kms_key_arn
    error_message = "queue_kms_key_arn switches the queues to SSE-KMS"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.terminating_stuck.evaluation_periods == 30 && aws_cloudwatch_metric_alarm.task_queue_age.threshold == 600
    error_message = "alarm inputs are honoured"
  }
  assert {
    condition     = aws_iam_role.agent.name_prefix == "autodiag-euw1-agent-" && aws_iam_instance_profile.agent.name_prefix == "autodiag-euw1-agent-"
    error_message = "name_prefix makes Terraform generate IAM names"
  }
  assert {
    condition     = aws_iam_role.agent.path == "/autodiag/" && aws_iam_instance_profile.agent.path == "/autodiag/" && aws_iam_role.agent.permissions_boundary == var.permissions_boundary
    error_message = "iam_path and permissions_boundary apply to the role and the profile"
  }
}

run "ssm_parameter_secret" {
  command = apply

  variables {
    lifecycle_source     = "sqs"
    redis_url_secret_arn = "arn:aws:ssm:eu-west-1:123456789012:parameter/autodiag/redis-url"
    name_prefix          = "ad-"
  }

  assert {
    condition     = local.secret_service == "ssm" && local.secret_via == "ssm.eu-west-1.amazonaws.com"
    error_message = "an SSM parameter ARN selects GetParameter"
  }
  assert {
    condition     = aws_iam_role.hook[0].name_prefix == "ad-lifecycle-hook-"
    error_message = "name_prefix applies to the hook role"
  }
}

run "rejects_secret_name_instead_of_arn" {
  command = plan

  variables {
    redis_url_secret_arn = "autodiag/redis"
  }

  expect_failures = [var.redis_url_secret_arn]
}

run "rejects_partial_secrets_manager_arn" {
  command = plan

  variables {
    # Without the random suffix IAM would not match the secret's real ARN.
    redis_url_secret_arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/redis"
  }

  expect_failures = [var.redis_url_secret_arn]
}

run "rejects_unknown_lifecycle_source" {
  command = plan

  variables {
    lifecycle_source = "both"
  }

  expect_failures = [var.lifecycle_source]
}

run "rejects_heartbeat_timeout_below_aws_minimum" {
  command = plan

  variables {
    heartbeat_timeout = 10
  }

  expect_failures = [var.heartbeat_timeout]
}

run "launch_hook_is_optional" {
  command = apply

  assert {
    condition     = length(aws_autoscaling_lifecycle_hook.launch) == 0 && output.launch_hook_name == null
    error_message = "no launch hook unless launch_hook = true"
  }
}

run "launch_hook_abandons_by_default" {
  command = apply

  variables {
    launch_hook = true
  }

  assert {
    condition     = aws_autoscaling_lifecycle_hook.launch[0].lifecycle_transition == "autoscaling:EC2_INSTANCE_LAUNCHING"
    error_message = "the launch hook must fire on launch"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.launch[0].default_result == "ABANDON" && aws_autoscaling_lifecycle_hook.launch[0].heartbeat_timeout == 600
    error_message = "an agent that never gets ready must have its instance abandoned"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.launch[0].name == "autodiag-launch" && output.launch_hook_name == "autodiag-launch"
    error_message = "default launch hook name is <name>-launch, and the output gives lifecycle.launch_hook_name"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.launch[0].autoscaling_group_name == "fleet" && aws_autoscaling_lifecycle_hook.launch[0].notification_target_arn == null
    error_message = "the launch hook attaches to asg_name, without a notification target"
  }
}

run "report_model_and_guardrail" {
  command = apply

  variables {
    report_model_arn     = "arn:aws:bedrock:eu-west-1::foundation-model/amazon.nova-lite-v1:0"
    report_guardrail_arn = "arn:aws:bedrock:eu-west-1:123456789012:guardrail/abc123def456"
  }

  assert {
    condition     = length([for s in data.aws_iam_policy_document.agent.statement : s if s.sid == "InvokeReportModel" && tolist(s.actions) == tolist(["bedrock:InvokeModel"]) && tolist(s.resources) == tolist([var.report_model_arn])]) == 1 && length([for s in data.aws_iam_policy_document.agent.statement : s if s.sid == "ApplyReportGuardrail" && tolist(s.actions) == tolist(["bedrock:ApplyGuardrail"]) && tolist(s.resources) == tolist([var.report_guardrail_arn])]) == 1
    error_message = "report_model_arn and report_guardrail_arn grant InvokeModel and ApplyGuardrail on exactly them"
  }
}

run "no_bedrock_grant_by_default" {
  command = plan

  assert {
    condition     = length([for s in data.aws_iam_policy_document.agent.statement : s if contains(["InvokeReportModel", "ApplyReportGuardrail"], coalesce(s.sid, "-"))]) == 0
    error_message = "no Bedrock grant without report_model_arn"
  }
}

run "rejects_model_id_instead_of_arn" {
  command = plan

  variables {
    report_model_arn = "amazon.nova-lite-v1:0"
  }

  expect_failures = [var.report_model_arn]
}

run "results_bucket_grants_put_under_the_prefix" {
  command = apply

  variables {
    results_bucket      = "diag-out"
    results_prefix      = "fleet/a"
    results_kms_key_arn = "arn:aws:kms:eu-west-1:123456789012:key/5678abcd-12ab-34cd-56ef-1234567890ab"
  }

  assert {
    condition     = output.results_objects_arn == "arn:aws:s3:::diag-out/fleet/a/*"
    error_message = "s3:PutObject is granted on exactly results_bucket/results_prefix/*"
  }
}

run "results_bucket_without_prefix" {
  command = apply

  variables {
    results_bucket = "diag-out"
    results_prefix = ""
  }

  assert {
    condition     = output.results_objects_arn == "arn:aws:s3:::diag-out/*"
    error_message = "an empty results_prefix grants the whole bucket, without a double slash"
  }
}

run "no_results_bucket_no_grant" {
  command = apply

  assert {
    condition     = output.results_objects_arn == null
    error_message = "without results_bucket nothing is granted on S3"
  }
}

run "credential_secrets_granted_by_service_with_kms_via_service" {
  command = apply

  variables {
    credential_secret_arns = [
      "arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/intake-token-AbC123",
      "arn:aws:ssm:eu-west-1:123456789012:parameter/autodiag/webhook-hmac",
      "arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/model-key-XyZ789",
    ]
    credential_secret_kms_key_arns = ["arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"]
  }

  assert {
    condition     = length([for s in data.aws_iam_policy_document.agent.statement : s if s.sid == "ReadCredentialSecrets" && tolist(s.actions) == tolist(["secretsmanager:GetSecretValue"]) && toset(s.resources) == toset([var.credential_secret_arns[0], var.credential_secret_arns[2]])]) == 1
    error_message = "Secrets Manager credential ARNs get GetSecretValue on exactly them"
  }
  assert {
    condition     = length([for s in data.aws_iam_policy_document.agent.statement : s if s.sid == "ReadCredentialParameters" && tolist(s.actions) == tolist(["ssm:GetParameter"]) && tolist(s.resources) == tolist([var.credential_secret_arns[1]])]) == 1
    error_message = "SSM credential ARNs get GetParameter on exactly them"
  }
  assert {
    condition     = length([for s in data.aws_iam_policy_document.agent.statement : s if s.sid == "DecryptCredentialSecrets" && tolist(s.actions) == tolist(["kms:Decrypt"]) && tolist(s.resources) == tolist(var.credential_secret_kms_key_arns)]) == 1 && toset(local.credential_via) == toset(["secretsmanager.eu-west-1.amazonaws.com", "ssm.eu-west-1.amazonaws.com"])
    error_message = "credential KMS keys decrypt only through the services holding the secrets"
  }
}

run "no_credential_grant_by_default" {
  command = plan

  assert {
    condition     = length([for s in data.aws_iam_policy_document.agent.statement : s if contains(["ReadCredentialSecrets", "ReadCredentialParameters", "DecryptCredentialSecrets"], coalesce(s.sid, "-"))]) == 0
    error_message = "no credential grant without credential_secret_arns"
  }
}

run "rejects_partial_credential_secret_arn" {
  command = plan

  variables {
    credential_secret_arns = ["arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/intake-token"]
  }

  expect_failures = [var.credential_secret_arns]
}

run "inference_profile_grants_its_foundation_models" {
  command = apply

  variables {
    report_model_arn             = "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.amazon.nova-lite-v1:0"
    report_foundation_model_arns = ["arn:aws:bedrock:eu-west-1::foundation-model/amazon.nova-lite-v1:0", "arn:aws:bedrock:eu-central-1::foundation-model/amazon.nova-lite-v1:0"]
  }

  assert {
    condition     = length([for s in data.aws_iam_policy_document.agent.statement : s if s.sid == "InvokeReportModel" && toset(s.resources) == toset(concat([var.report_model_arn], var.report_foundation_model_arns))]) == 1
    error_message = "an inference profile grants InvokeModel on the profile and on its foundation models"
  }
}

run "inference_profile_without_foundation_models_is_refused" {
  command = plan

  variables {
    report_model_arn = "arn:aws:bedrock:eu-west-1:123456789012:inference-profile/eu.amazon.nova-lite-v1:0"
  }

  expect_failures = [aws_iam_role_policy.agent]
}

run "hook_role_trusts_only_this_account" {
  command = apply

  variables {
    lifecycle_source = "sqs"
  }

  assert {
    condition     = length([for s in data.aws_iam_policy_document.hook_assume[0].statement : s if length([for c in s.condition : c if c.test == "StringEquals" && c.variable == "aws:SourceAccount" && tolist(c.values) == tolist(["123456789012"])]) == 1]) == 1
    error_message = "the hook role's trust policy must carry aws:SourceAccount = the account"
  }
}

run "hooks_for_the_group_when_not_created" {
  command = apply

  variables {
    create_lifecycle_hooks = false
    launch_hook            = true
  }

  assert {
    condition     = length(aws_autoscaling_lifecycle_hook.drain) == 0 && length(aws_autoscaling_lifecycle_hook.launch) == 0
    error_message = "create_lifecycle_hooks = false creates no hook resource"
  }
  assert {
    condition     = length(output.lifecycle_hooks) == 2 && output.lifecycle_hooks[0].lifecycle_transition == "autoscaling:EC2_INSTANCE_TERMINATING" && output.lifecycle_hooks[1].lifecycle_transition == "autoscaling:EC2_INSTANCE_LAUNCHING" && output.lifecycle_hooks[1].default_result == "ABANDON"
    error_message = "lifecycle_hooks lists the drain hook and the launch hook (ABANDON by default)"
  }
}
