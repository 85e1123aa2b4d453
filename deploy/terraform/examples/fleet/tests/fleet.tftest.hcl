# terraform test, offline: the AWS provider is mocked. Checks that the example
# renders a complete agent config from the module outputs for both lifecycle
# sources, with timeouts that nest.

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

  mock_resource "aws_launch_template" {
    defaults = {
      id             = "lt-0123456789abcdef0"
      latest_version = 1
    }
  }

  mock_data "aws_ssm_parameter" {
    defaults = {
      value          = "ami-0123456789abcdef0"
      insecure_value = "ami-0123456789abcdef0"
    }
  }

  mock_resource "aws_autoscaling_group" {
    defaults = {
      arn = "arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:0b6c6a8e-0000-4000-8000-000000000000:autoScalingGroupName/autodiag"
    }
  }

  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
}

variables {
  region                 = "eu-west-1"
  subnet_ids             = ["subnet-1", "subnet-2"]
  security_group_ids     = ["sg-1"]
  autodiag_binary_url    = "https://releases.example.com/autodiag/v1.0.0/autodiag-linux-amd64"
  autodiag_binary_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
  redis_url_secret_arn   = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/redis-AbC123"
}

run "imds_fleet" {
  command = apply

  assert {
    condition     = jsonencode(local.agent_config.lifecycle.sources) == jsonencode(["signal", "imds"]) && local.agent_config.lifecycle.queue_url == ""
    error_message = "imds fleet: sources [signal, imds], no lifecycle queue"
  }
  assert {
    condition     = local.agent_config.lifecycle.hook_name == "autodiag-drain" && local.agent_config.lifecycle.asg_name == "autodiag"
    error_message = "config must name the module's hook and the group"
  }
  assert {
    condition     = local.agent_config.lifecycle.hook_heartbeat_timeout == "300s" && local.agent_config.lifecycle.heartbeat_interval == "30s"
    error_message = "hook heartbeat timeout (300s) must exceed 2 x heartbeat_interval (30s)"
  }
  assert {
    condition     = local.agent_config.queue.url == module.autodiag.task_queue_url && local.agent_config.queue.dlq_url == module.autodiag.dlq_url
    error_message = "config must point at the module's queues"
  }
  assert {
    condition     = local.agent_config.redis.url_secret == var.redis_url_secret_arn && !contains(keys(local.agent_config.redis), "url") && local.agent_config.cloudwatch.enabled
    error_message = "config must name the Redis URL secret (never the URL) and enable CloudWatch"
  }
  assert {
    condition     = !strcontains(local.user_data, "redis://") && !strcontains(local.user_data, "rediss://") && strcontains(local.user_data, "\"url_secret\": \"${var.redis_url_secret_arn}\"")
    error_message = "user data must hold the secret's ARN and no Redis URL"
  }
  assert {
    condition     = strcontains(local.user_data, "TimeoutStopSec=15min") && strcontains(local.user_data, "Type=notify") && strcontains(local.user_data, "systemctl enable --now autodiag.service")
    error_message = "user data must install and enable the systemd unit"
  }
  assert {
    condition     = module.autodiag.alarm_arns["terminating_stuck"] != null && contains(aws_autoscaling_group.fleet.enabled_metrics, "GroupTerminatingInstances") && aws_autoscaling_group.fleet.metrics_granularity == "1Minute"
    error_message = "the group must publish GroupTerminatingInstances for the terminating-stuck alarm"
  }
  assert {
    condition     = aws_launch_template.fleet.image_id == "ami-0123456789abcdef0"
    error_message = "the AMI comes from the SSM parameter"
  }
  assert {
    condition     = strcontains(local.user_data, "sha256sum --check") && strcontains(local.user_data, "AWS_REGION=eu-west-1")
    error_message = "user data must verify the binary and set the region"
  }
  assert {
    condition     = aws_launch_template.fleet.metadata_options[0].http_tokens == "required"
    error_message = "IMDSv2 only"
  }
}

run "sqs_fleet" {
  command = apply

  variables {
    lifecycle_source = "sqs"
  }

  assert {
    condition     = jsonencode(local.agent_config.lifecycle.sources) == jsonencode(["signal", "sqs"]) && local.agent_config.lifecycle.queue_url == module.autodiag.lifecycle_queue_url
    error_message = "sqs fleet: sources [signal, sqs] and the lifecycle queue URL"
  }
}

run "results_bucket_in_the_config" {
  command = apply

  variables {
    results_bucket      = "diag-out"
    results_prefix      = "fleet/a"
    results_kms_key_arn = "arn:aws:kms:eu-west-1:123456789012:key/5678abcd-12ab-34cd-56ef-1234567890ab"
  }

  assert {
    condition     = local.agent_config.results.s3.bucket == "diag-out" && local.agent_config.results.s3.prefix == "fleet/a" && local.agent_config.results.s3.sse == "aws:kms" && local.agent_config.results.s3.kms_key_id == var.results_kms_key_arn
    error_message = "results_bucket, results_prefix and results_kms_key_arn become results.s3 in the agent config"
  }
  assert {
    condition     = module.autodiag.results_objects_arn == "arn:aws:s3:::diag-out/fleet/a/*"
    error_message = "the module grants PutObject under the configured prefix"
  }
}

run "no_results_bucket_no_results_section" {
  command = apply

  assert {
    condition     = !contains(keys(local.agent_config), "results")
    error_message = "without results_bucket the agent config has no results section"
  }
}
