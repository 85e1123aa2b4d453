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
    condition     = aws_autoscaling_lifecycle_hook.drain.notification_target_arn == null && aws_autoscaling_lifecycle_hook.drain.role_arn == null
    error_message = "the imds hook must have no notification target"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain.lifecycle_transition == "autoscaling:EC2_INSTANCE_TERMINATING"
    error_message = "the hook must fire on termination"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain.name == "autodiag-drain" && output.lifecycle_hook_name == "autodiag-drain"
    error_message = "default hook name is <name>-drain"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain.autoscaling_group_name == "fleet"
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
    condition     = aws_cloudwatch_metric_alarm.drain_stuck.threshold == 600 && aws_cloudwatch_metric_alarm.drain_stuck.statistic == "Maximum"
    error_message = "drain-stuck alarm: Maximum DrainSeconds above 10 minutes by default"
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
    condition     = aws_autoscaling_lifecycle_hook.drain.notification_target_arn == aws_sqs_queue.lifecycle[0].arn && aws_autoscaling_lifecycle_hook.drain.role_arn == aws_iam_role.hook[0].arn
    error_message = "the hook must publish to the lifecycle queue with the hook role"
  }
  assert {
    condition     = aws_autoscaling_lifecycle_hook.drain.name == "drain-me"
    error_message = "lifecycle_hook_name must override the default"
  }
  assert {
    condition     = jsondecode(aws_sqs_queue.tasks.redrive_policy).maxReceiveCount == 3
    error_message = "redrive maxReceiveCount must follow max_receive_count"
  }
  assert {
    condition     = aws_cloudwatch_metric_alarm.drain_stuck.threshold == 900
    error_message = "drain_stuck_minutes is in minutes"
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
