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
    condition     = strcontains(local.user_data, "install -m 0755 -o root -g root /tmp/autodiag /usr/local/bin/autodiag\n") && strcontains(local.user_data, "cat > /etc/systemd/system/autodiag.service <<") && strcontains(local.user_data, "/usr/local/bin/autodiag config validate --config /etc/autodiag/config.yaml \\\n  --systemd-unit /etc/systemd/system/autodiag.service\n") && !strcontains(local.user_data, "apt-get") && !strcontains(local.user_data, "rpm ")
    error_message = "binary install: the binary where the unit's ExecStart looks, the unit in /etc/systemd/system, validated together"
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

# The same fleet installed from the release's .deb: the package's binary and
# unit (with its drop-in), no unit written by user data.
run "deb_package_fleet" {
  command = apply

  variables {
    autodiag_binary_url     = null
    autodiag_binary_sha256  = null
    autodiag_package_url    = "https://releases.example.com/autodiag/v1.0.0/autodiag_1.0.0_amd64.deb"
    autodiag_package_sha256 = "1111111111111111111111111111111111111111111111111111111111111111"
  }

  assert {
    condition     = strcontains(local.user_data, "-o /tmp/autodiag.deb 'https://releases.example.com/autodiag/v1.0.0/autodiag_1.0.0_amd64.deb'") && strcontains(local.user_data, "echo '1111111111111111111111111111111111111111111111111111111111111111  /tmp/autodiag.deb' | sha256sum --check --strict -")
    error_message = "deb install: download the package and verify it"
  }
  assert {
    condition     = strcontains(local.user_data, "apt-get install -y -o DPkg::Lock::Timeout=300 /tmp/autodiag.deb\n") && !strcontains(local.user_data, "rpm ")
    error_message = "deb install: apt-get installs the package, waiting a bounded time for the dpkg lock"
  }
  assert {
    condition     = strcontains(local.user_data, "/usr/bin/autodiag config validate --config /etc/autodiag/config.yaml \\\n  --systemd-unit /lib/systemd/system/autodiag.service\n") && strcontains(local.user_data, "systemctl enable --now autodiag.service")
    error_message = "deb install: validate against the packaged unit and enable it"
  }
  assert {
    condition     = !strcontains(local.user_data, "/usr/local/bin") && !strcontains(local.user_data, "TimeoutStopSec") && !strcontains(local.user_data, "cat > /etc/systemd/system/autodiag.service") && !strcontains(local.user_data, "useradd")
    error_message = "deb install: the package brings the unit and the user; user data writes neither"
  }
}

run "rpm_package_fleet" {
  command = apply

  variables {
    autodiag_binary_url     = null
    autodiag_binary_sha256  = null
    autodiag_package_url    = "https://bucket.s3.eu-west-1.amazonaws.com/autodiag-1.0.0-1.x86_64.rpm?X-Amz-Expires=3600"
    autodiag_package_sha256 = "1111111111111111111111111111111111111111111111111111111111111111"
  }

  assert {
    condition     = strcontains(local.user_data, "rpm --upgrade --replacepkgs /tmp/autodiag.rpm\n") && !strcontains(local.user_data, "apt-get") && strcontains(local.user_data, "--systemd-unit /lib/systemd/system/autodiag.service")
    error_message = "rpm install (format read from the URL's path, before its query string)"
  }
}

run "both_sources_refused" {
  command = plan

  variables {
    autodiag_package_url    = "https://releases.example.com/autodiag/v1.0.0/autodiag_1.0.0_amd64.deb"
    autodiag_package_sha256 = "1111111111111111111111111111111111111111111111111111111111111111"
  }

  expect_failures = [aws_launch_template.fleet]
}

run "package_without_checksum_refused" {
  command = plan

  variables {
    autodiag_binary_url    = null
    autodiag_binary_sha256 = null
    autodiag_package_url   = "https://releases.example.com/autodiag/v1.0.0/autodiag_1.0.0_amd64.deb"
  }

  expect_failures = [aws_launch_template.fleet]
}

run "not_a_package_refused" {
  command = plan

  variables {
    autodiag_binary_url     = null
    autodiag_binary_sha256  = null
    autodiag_package_url    = "https://releases.example.com/autodiag/v1.0.0/autodiag_1.0.0_linux_amd64.tar.gz"
    autodiag_package_sha256 = "1111111111111111111111111111111111111111111111111111111111111111"
  }

  expect_failures = [var.autodiag_package_url]
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

run "launch_hook_in_the_group_and_the_config" {
  command = apply

  assert {
    condition     = local.agent_config.lifecycle.launch_hook_name == "autodiag-launch" && module.autodiag.launch_hook_name == "autodiag-launch"
    error_message = "the example enables the launch hook and names it in the agent config"
  }
  assert {
    condition     = length(aws_autoscaling_group.fleet.initial_lifecycle_hook) == 2 && length([for h in aws_autoscaling_group.fleet.initial_lifecycle_hook : h if h.lifecycle_transition == "autoscaling:EC2_INSTANCE_LAUNCHING" && h.default_result == "ABANDON" && h.heartbeat_timeout == 600]) == 1
    error_message = "the group carries both hooks from its creation, the launch one ABANDONing after launch_heartbeat_timeout"
  }
  assert {
    condition     = module.autodiag.alarm_arns != null && !strcontains(local.user_data, "aws autoscaling") && strcontains(local.user_data, "ABANDON")
    error_message = "an install failure relies on the launch hook, not the aws CLI"
  }
}

run "admin_token_from_a_secret" {
  command = apply

  variables {
    admin_token_secret_arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:autodiag/admin-token-XyZ789"
  }

  assert {
    condition     = local.agent_config.admin_auth.bearer_token_secret == var.admin_token_secret_arn && local.agent_config.admin_addr == "0.0.0.0:9464"
    error_message = "the admin token comes from its secret, and only then does the admin API leave loopback"
  }
  assert {
    condition     = contains(module.autodiag.credential_secret_arns, var.admin_token_secret_arn)
    error_message = "the instance role may read the admin token's secret"
  }
}
