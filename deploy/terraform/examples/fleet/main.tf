# A complete autodiag fleet: launch template + Auto Scaling group + the
# autodiag module. User data installs the release binary or package, writes
# /etc/autodiag/config.yaml and enables the systemd unit from deploy/systemd.

locals {
  # One source of truth: the production example config from deploy/config,
  # with the values only this deployment knows filled in.
  base_config = yamldecode(file("${path.module}/../../../config/example.yaml"))

  agent_config = merge(local.base_config, {
    queue = merge(local.base_config.queue, {
      url     = module.autodiag.task_queue_url
      dlq_url = module.autodiag.dlq_url
    })
    # The agent fetches the URL with its instance role; user data holds only
    # the secret's ARN.
    redis = merge({ for k, v in local.base_config.redis : k => v if k != "url" }, {
      url_secret = var.redis_url_secret_arn
    })
    lifecycle = merge(local.base_config.lifecycle, {
      sources = module.autodiag.lifecycle_sources
      # null with the imds source; coalesce() would fail on (null, "").
      queue_url              = module.autodiag.lifecycle_queue_url == null ? "" : module.autodiag.lifecycle_queue_url
      hook_name              = module.autodiag.lifecycle_hook_name
      asg_name               = var.name
      hook_heartbeat_timeout = "${module.autodiag.heartbeat_timeout}s"
      launch_hook_name       = module.autodiag.launch_hook_name
    })
    # With admin_token_secret_arn the admin API may listen beyond loopback
    # (a metrics scraper, `autodiag drain` from a bastion): the token comes
    # from that secret, read with the instance role, never from user data.
    admin_addr = var.admin_token_secret_arn == null ? local.base_config.admin_addr : "0.0.0.0:9464"
    cloudwatch = {
      enabled   = true
      namespace = module.autodiag.metrics_namespace
    }
    },
    # results.s3 only with a bucket (a for expression: a conditional cannot
    # choose between objects of different shapes).
    { for k, v in {
      results = {
        s3 = merge(
          { bucket = var.results_bucket, prefix = var.results_prefix },
          { sse = var.results_kms_key_arn == null ? "AES256" : "aws:kms" },
          { for name, key in { kms_key_id = var.results_kms_key_arn } : name => key if key != null },
        )
      }
    } : k => v if var.results_bucket != null },
    { for k, v in {
      admin_auth = { bearer_token_secret = var.admin_token_secret_arn }
    } : k => v if var.admin_token_secret_arn != null },
  )

  # One unit for both installs: deploy/systemd/autodiag.service. The
  # package ships it in /lib/systemd/system with a drop-in that moves
  # ExecStart to the package's /usr/bin (packaging/systemd/packaged.conf);
  # the bare binary goes where the unit's own ExecStart looks.
  systemd_unit = file("${path.module}/../../../systemd/autodiag.service")
  install_from = var.autodiag_package_url != null ? "package" : "binary"
  # "none" stands in for what is missing until the launch template's
  # preconditions say which input to set.
  install = local.install_from == "package" ? {
    url         = var.autodiag_package_url
    sha256      = coalesce(var.autodiag_package_sha256, "none")
    format      = regex("\\.(deb|rpm)(?:\\?.*)?$", var.autodiag_package_url)[0]
    binary_path = "/usr/bin/autodiag"
    unit_path   = "/lib/systemd/system/autodiag.service"
    } : {
    url         = coalesce(var.autodiag_binary_url, "none")
    sha256      = coalesce(var.autodiag_binary_sha256, "none")
    format      = ""
    binary_path = regex("(?m)^ExecStart=(\\S+)", local.systemd_unit)[0]
    unit_path   = "/etc/systemd/system/autodiag.service"
  }

  user_data = templatefile("${path.module}/templates/user-data.sh.tftpl", {
    region          = var.region
    asg_name        = var.name
    install_from    = local.install_from
    download_url    = local.install.url
    download_sha256 = local.install.sha256
    package_format  = local.install.format
    binary_path     = local.install.binary_path
    unit_path       = local.install.unit_path
    config_yaml     = yamlencode(local.agent_config)
    systemd_unit    = local.systemd_unit
  })
}

data "aws_ssm_parameter" "ami" {
  name = var.ami_ssm_parameter
}

locals {
  # insecure_value: an AMI id is no secret, and a plan must show when the
  # parameter moves to a new AMI (value is sensitive and would hide it).
  ami_id = data.aws_ssm_parameter.ami.insecure_value
}

resource "aws_launch_template" "fleet" {
  name_prefix            = "${var.name}-"
  image_id               = local.ami_id
  instance_type          = var.instance_type
  vpc_security_group_ids = var.security_group_ids
  user_data              = base64encode(local.user_data)

  lifecycle {
    precondition {
      condition     = (var.autodiag_binary_url == null) != (var.autodiag_package_url == null)
      error_message = "Set exactly one of autodiag_binary_url and autodiag_package_url."
    }
    precondition {
      condition     = local.install.sha256 != "none"
      error_message = "Set the SHA-256 of what user data downloads: autodiag_binary_sha256 with autodiag_binary_url, autodiag_package_sha256 with autodiag_package_url."
    }
  }

  iam_instance_profile {
    name = module.autodiag.instance_profile_name
  }

  # IMDSv2 only; the agent's imds source polls target-lifecycle-state.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(var.tags, { Name = var.name })
  }

  tags = var.tags
}

resource "aws_autoscaling_group" "fleet" {
  name                = var.name
  min_size            = var.min_size
  max_size            = var.max_size
  desired_capacity    = var.desired_capacity
  vpc_zone_identifier = var.subnet_ids
  health_check_type   = "EC2"

  # GroupTerminatingInstances feeds the module's terminating-stuck alarm, the
  # one that needs no agent (module.autodiag.group_metrics).
  enabled_metrics     = ["GroupTerminatingInstances", "GroupInServiceInstances", "GroupDesiredCapacity"]
  metrics_granularity = "1Minute"

  launch_template {
    id      = aws_launch_template.fleet.id
    version = aws_launch_template.fleet.latest_version
  }

  # The hooks live in the group, so they exist before its first instance
  # launches: the launch hook holds each new instance in Pending:Wait until
  # its agent is ready (or ABANDONs it), the drain hook lets it drain.
  # Auto Scaling reads initial_lifecycle_hook only when it creates a group:
  # a deployment whose group already exists keeps create_lifecycle_hooks =
  # true in the module call instead (and drops this block).
  dynamic "initial_lifecycle_hook" {
    for_each = module.autodiag.lifecycle_hooks
    content {
      name                    = initial_lifecycle_hook.value.name
      lifecycle_transition    = initial_lifecycle_hook.value.lifecycle_transition
      heartbeat_timeout       = initial_lifecycle_hook.value.heartbeat_timeout
      default_result          = initial_lifecycle_hook.value.default_result
      notification_target_arn = initial_lifecycle_hook.value.notification_target_arn
      role_arn                = initial_lifecycle_hook.value.role_arn
    }
  }

  # Replace instances when the launch template changes; the lifecycle hook
  # lets each replaced agent drain first.
  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage = 50
    }
  }

  dynamic "tag" {
    for_each = var.tags
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  # First boot without races: no instance launches before the instance
  # role's policy (and the queues, the hook role and its policy) exist. The
  # module takes the group's name as a plain string, so this is no cycle.
  depends_on = [module.autodiag]
}

module "autodiag" {
  source = "../../modules/autodiag"

  name = var.name
  # var.name, not aws_autoscaling_group.fleet.name: the group depends on
  # the module (depends_on above), so the module must not depend on it.
  asg_name               = var.name
  lifecycle_source       = var.lifecycle_source
  create_lifecycle_hooks = false
  # The agent completes it once ready; an install that fails leaves it to
  # time out with ABANDON, so the group replaces the instance.
  launch_hook              = true
  launch_heartbeat_timeout = var.launch_heartbeat_timeout

  # Hook heartbeat timeout 300s > 2 x lifecycle.heartbeat_interval (30s);
  # global timeout min(48h, 100 x 300s) = 8h20m > lifecycle.drain_timeout (10m).
  heartbeat_timeout = 300
  default_result    = "CONTINUE"
  max_receive_count = 5

  # DrainSeconds passes 11 minutes only when a drain that used its 10m
  # budget (+ 30s cancel grace) is still completing a minute later; the
  # nesting rule is in docs/operations.md and deploy/deploy_test.go checks it.
  drain_stuck_minutes           = 11
  enable_limiter_degraded_alarm = true
  alarm_sns_topic_arn           = var.alarm_sns_topic_arn

  redis_url_secret_arn         = var.redis_url_secret_arn
  redis_url_secret_kms_key_arn = var.redis_url_secret_kms_key_arn
  credential_secret_arns       = compact([var.admin_token_secret_arn])

  results_bucket      = var.results_bucket
  results_prefix      = var.results_prefix
  results_kms_key_arn = var.results_kms_key_arn

  tags = var.tags
}
