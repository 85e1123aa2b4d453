output "asg_name" {
  description = "Name of the Auto Scaling group."
  value       = aws_autoscaling_group.fleet.name
}

output "task_queue_url" {
  description = "Where the alert router sends tasks (autodiag enqueue --queue-url)."
  value       = module.autodiag.task_queue_url
}

output "dlq_url" {
  description = "Dead-letter queue to inspect when the DLQ alarm fires."
  value       = module.autodiag.dlq_url
}

output "lifecycle_hook_name" {
  description = "Hook name for manual complete-lifecycle-action calls."
  value       = module.autodiag.lifecycle_hook_name
}

output "alarm_arns" {
  description = "Alarms created by the module."
  value       = module.autodiag.alarm_arns
}
