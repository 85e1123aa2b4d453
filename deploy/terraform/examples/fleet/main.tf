# A complete autodiag fleet: launch template + Auto Scaling group + the
# autodiag module. User data installs the binary, writes
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
    redis = merge(local.base_config.redis, {
      url = var.redis_url
    })
    lifecycle = merge(local.base_config.lifecycle, {
      sources = module.autodiag.lifecycle_sources
      # null with the imds source; coalesce() would fail on (null, "").
      queue_url              = module.autodiag.lifecycle_queue_url == null ? "" : module.autodiag.lifecycle_queue_url
      hook_name              = module.autodiag.lifecycle_hook_name
      asg_name               = var.name
      hook_heartbeat_timeout = "${module.autodiag.heartbeat_timeout}s"
    })
    cloudwatch = {
      enabled   = true
      namespace = module.autodiag.metrics_namespace
    }
  })

  user_data = templatefile("${path.module}/templates/user-data.sh.tftpl", {
    region        = var.region
    binary_url    = var.autodiag_binary_url
    binary_sha256 = var.autodiag_binary_sha256
    config_yaml   = yamlencode(local.agent_config)
    systemd_unit  = file("${path.module}/../../../systemd/autodiag.service")
  })
}

data "aws_ssm_parameter" "ami" {
  name = var.ami_ssm_parameter
}

resource "aws_launch_template" "fleet" {
  name_prefix            = "${var.name}-"
  image_id               = data.aws_ssm_parameter.ami.value
  instance_type          = var.instance_type
  vpc_security_group_ids = var.security_group_ids
  user_data              = base64encode(local.user_data)

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

  launch_template {
    id      = aws_launch_template.fleet.id
    version = aws_launch_template.fleet.latest_version
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
}

module "autodiag" {
  source = "../../modules/autodiag"

  name             = var.name
  asg_name         = aws_autoscaling_group.fleet.name
  lifecycle_source = var.lifecycle_source

  # Hook heartbeat timeout 300s > 2 x lifecycle.heartbeat_interval (30s);
  # global timeout min(48h, 100 x 300s) = 8h20m > lifecycle.drain_timeout (10m).
  heartbeat_timeout = 300
  default_result    = "CONTINUE"
  max_receive_count = 5

  # drain_timeout is 10m; allow the completion call and a slow heartbeat.
  drain_stuck_minutes           = 12
  enable_limiter_degraded_alarm = true
  alarm_sns_topic_arn           = var.alarm_sns_topic_arn

  tags = var.tags
}
