# Broken on purpose: wildcard resources on mutating actions.
# TestRejectsWildcardPolicies expects checkPolicies to reject exactly these.

data "aws_iam_policy_document" "agent" {
  statement {
    sid       = "ConsumeTasks"
    actions   = ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"]
    resources = ["*"]
  }

  statement {
    sid       = "CompleteAnyLifecycleAction"
    actions   = ["autoscaling:CompleteLifecycleAction"]
    resources = ["*"]
  }

  statement {
    # Fine: read-only on "*".
    sid       = "FindOwnGroup"
    actions   = ["autoscaling:DescribeAutoScalingInstances"]
    resources = ["*"]
  }
}
