# The role every training instance runs as: its checkpoint prefix, and stopping or
# terminating the broker's own clusters, nothing else. SkyPilot's autostop/autodown
# runs on the cluster's head under this role (sky/skylet/events.py clears the AWS
# credentials to use the instance's role) and is the broker's safety net while no
# broker runs: without these rights a cluster left behind ran, and billed, until
# someone noticed.
locals {
  # SkyPilot tags every instance of a cluster with ray-cluster-name (and
  # skypilot-cluster-name) = the cluster's name on the cloud, which begins with the
  # broker's cluster name: <cluster_prefix>-j-<job>-a<n> (launchers/skypilot.py
  # cluster_name). The "-j-" keeps broker-staging's clusters out of broker's.
  own_cluster_names = "${var.cluster_prefix}-j-*"
}

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "training" {
  name               = local.training_role_name
  description        = "Assumed by ${var.name} training instances: read and write ${local.checkpoint_root}/, stop or terminate ${var.cluster_prefix} clusters"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
}

resource "aws_iam_instance_profile" "training" {
  name = local.training_role_name
  role = aws_iam_role.training.name
}

resource "aws_iam_role_policy" "training_checkpoints" {
  name   = "checkpoint-prefix-only"
  role   = aws_iam_role.training.id
  policy = data.aws_iam_policy_document.training_checkpoints.json
}

data "aws_iam_policy_document" "training_checkpoints" {
  statement {
    sid       = "ListCheckpointPrefix"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.checkpoints.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${local.checkpoint_prefix}/*"]
    }
  }
  statement {
    sid       = "ReadWriteCheckpointPrefix"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    resources = ["${aws_s3_bucket.checkpoints.arn}/${local.checkpoint_prefix}/*"]
  }
  statement {
    sid       = "UseTheBucketKey"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [aws_kms_key.broker.arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${var.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "training_autodown" {
  name   = "autodown-own-clusters"
  role   = aws_iam_role.training.id
  policy = data.aws_iam_policy_document.training_autodown.json
}

# What SkyPilot's stop_instances and terminate_instances (sky/provision/aws/instance.py)
# call from the cluster: find the cluster's instances by tag, find the VPC's default
# security group, move the instances onto it (a cluster with ports, on its own
# sky-sg-<cluster> group), then stop or terminate them.
data "aws_iam_policy_document" "training_autodown" {
  statement {
    # Describe calls cannot be scoped to resources or tags.
    sid       = "FindTheCluster"
    actions   = ["ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeVpcs"]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    sid       = "StopOrTerminateOwnClusters"
    actions   = ["ec2:StopInstances", "ec2:TerminateInstances", "ec2:ModifyInstanceAttribute"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:instance/*"]
    condition {
      test     = "StringLike"
      variable = "ec2:ResourceTag/ray-cluster-name"
      values   = [local.own_cluster_names]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    # The security group the instances are moved onto before terminating: SkyPilot's
    # own, which it tags skypilot=true when it creates it.
    sid       = "MoveOntoSkyPilotGroups"
    actions   = ["ec2:ModifyInstanceAttribute"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:security-group/*"]
    condition {
      test     = "StringEquals"
      variable = "ec2:ResourceTag/skypilot"
      values   = ["true"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
}
