# Two roles for the broker tasks: ECS's execution role (pull the image, write
# logs, read the secrets it injects) and the task role the broker itself runs
# as (its bucket, and what SkyPilot needs to launch GPU instances). SkyPilot
# picks the task role up through the container credentials endpoint, like any
# boto3 client.

data "aws_iam_policy_document" "ecs_tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }
}

resource "aws_iam_role" "execution" {
  name               = "${var.name}-execution"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

resource "aws_iam_role_policy_attachment" "execution_managed" {
  role       = aws_iam_role.execution.name
  policy_arn = "arn:${data.aws_partition.current.partition}:iam::aws:policy/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role_policy" "execution_secrets" {
  name   = "inject-secrets"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.execution_secrets.json
}

data "aws_iam_policy_document" "execution_secrets" {
  statement {
    sid       = "ReadInjectedSecrets"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [for name in local.secret_names : aws_secretsmanager_secret.broker[name].arn]
  }
  statement {
    sid       = "DecryptThem"
    actions   = ["kms:Decrypt"]
    resources = [aws_kms_key.broker.arn]
  }
}

resource "aws_iam_role" "task" {
  name               = "${var.name}-task"
  assume_role_policy = data.aws_iam_policy_document.ecs_tasks_assume.json
}

# No Secrets Manager here: ECS injects the secrets with the execution role, and the broker never
# reads them itself; every process in the container (SkyPilot too) runs as this role.
resource "aws_iam_role_policy" "task_storage" {
  name   = "checkpoints"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task_storage.json
}

data "aws_iam_policy_document" "task_storage" {
  statement {
    sid       = "ListCheckpoints"
    actions   = ["s3:ListBucket", "s3:GetBucketLocation"]
    resources = [aws_s3_bucket.checkpoints.arn]
  }
  statement {
    sid       = "ReadWriteCheckpoints"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    resources = ["${aws_s3_bucket.checkpoints.arn}/*"]
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

resource "aws_iam_role_policy" "task_skypilot" {
  name   = "skypilot-launch"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task_skypilot.json
}

# SkyPilot's documented minimal AWS policy, narrowed: GPU instance types only,
# launch regions only, and the <name>-training profile instead of skypilot-v1
# (set aws.remote_identity to the training_instance_profile output in SkyPilot's config).
data "aws_iam_policy_document" "task_skypilot" {
  statement {
    sid       = "LaunchGpuInstancesOnly"
    actions   = ["ec2:RunInstances"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:instance/*"]
    condition {
      test     = "StringLike"
      variable = "ec2:InstanceType"
      values   = var.gpu_instance_types
    }
    condition {
      # SkyPilot names the cluster in RunInstances' own tags: an instance launched with this role
      # is always one of the broker's clusters, which the rights below are scoped to.
      test     = "StringLike"
      variable = "aws:RequestTag/ray-cluster-name"
      values   = [local.own_cluster_names]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    sid     = "LaunchWithTheseResources"
    actions = ["ec2:RunInstances"]
    resources = [
      "arn:${data.aws_partition.current.partition}:ec2:*::image/ami-*",
      "arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:network-interface/*",
      "arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:subnet/*",
      "arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:volume/*",
      "arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:security-group/*",
      "arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:spot-instances-request/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    # Only the broker's own clusters (SkyPilot's ray-cluster-name tag, set at launch above).
    # ModifyInstanceAttribute: SkyPilot moves a cluster onto another security group when it
    # opens ports, and onto the default one before terminating a cluster that had ports.
    sid       = "ManageOwnClusters"
    actions   = ["ec2:TerminateInstances", "ec2:StartInstances", "ec2:StopInstances", "ec2:ModifyInstanceAttribute"]
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
    # Tags in RunInstances' own TagSpecifications (the launch statement checks them).
    sid       = "TagInstancesAtLaunch"
    actions   = ["ec2:CreateTags"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:instance/*"]
    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["RunInstances"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    # SkyPilot re-tags its head node and the instances it restarts (with the tags they
    # carry): only the broker's clusters, and never renamed to a cluster not the broker's.
    # No DeleteTags: SkyPilot never removes a tag.
    sid       = "TagOwnClusters"
    actions   = ["ec2:CreateTags"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:instance/*"]
    condition {
      test     = "StringLike"
      variable = "ec2:ResourceTag/ray-cluster-name"
      values   = [local.own_cluster_names]
    }
    condition {
      test     = "StringLikeIfExists"
      variable = "aws:RequestTag/ray-cluster-name"
      values   = [local.own_cluster_names]
    }
    condition {
      test     = "StringLikeIfExists"
      variable = "aws:RequestTag/skypilot-cluster-name"
      values   = [local.own_cluster_names]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    # SkyPilot tags the root volume in RunInstances' own TagSpecifications; without this every launch was refused
    # once ("Volumes will not be tagged"), retried without them, and the volumes left out of tag-based cost reports
    sid       = "TagVolumesAtLaunch"
    actions   = ["ec2:CreateTags"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:volume/*"]
    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["RunInstances"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    # SkyPilot creates its security groups (sky-sg-<user hash>, or sky-sg-<cluster> for a
    # cluster with ports) tagged skypilot=true (sky/provision/aws/config.py); the vpc is the
    # other resource CreateSecurityGroup is authorized on.
    sid       = "CreateSecurityGroupsInVpcs"
    actions   = ["ec2:CreateSecurityGroup"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:vpc/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    sid       = "CreateSkyPilotSecurityGroups"
    actions   = ["ec2:CreateSecurityGroup"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:security-group/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/skypilot"
      values   = ["true"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    # Tagging at creation is authorized as CreateTags too.
    sid       = "TagSecurityGroupsAtCreation"
    actions   = ["ec2:CreateTags"]
    resources = ["arn:${data.aws_partition.current.partition}:ec2:*:${data.aws_caller_identity.current.account_id}:security-group/*"]
    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["CreateSecurityGroup"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = var.launch_regions
    }
  }
  statement {
    # Open ingress (SSH, the cluster's own traffic, a task's ports) and move instances onto
    # SkyPilot's own groups only, never any other security group of the account.
    sid       = "UseSkyPilotSecurityGroups"
    actions   = ["ec2:AuthorizeSecurityGroupIngress", "ec2:ModifyInstanceAttribute"]
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
  statement {
    # Read-only calls that EC2 cannot scope to resources: the ones SkyPilot's
    # AWS provisioner (0.14) makes, instead of its documented ec2:Describe*.
    sid = "DescribeForPlacement"
    actions = [
      "ec2:DescribeAvailabilityZones",
      "ec2:DescribeImages",
      "ec2:DescribeInstanceStatus",
      "ec2:DescribeInstanceTypeOfferings",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeInstances",
      "ec2:DescribeKeyPairs",
      "ec2:DescribeRegions",
      "ec2:DescribeRouteTables",
      "ec2:DescribeSecurityGroups",
      "ec2:DescribeSpotInstanceRequests",
      "ec2:DescribeSpotPriceHistory",
      "ec2:DescribeSubnets",
      "ec2:DescribeVpcs",
    ]
    resources = ["*"]
  }
  statement {
    # SkyPilot skips regions whose GPU quota is zero before trying them.
    sid       = "ReadEc2Quotas"
    actions   = ["servicequotas:GetServiceQuota"]
    resources = ["arn:${data.aws_partition.current.partition}:servicequotas:*:${data.aws_caller_identity.current.account_id}:ec2/*"]
  }
  statement {
    sid       = "PassTrainingRole"
    actions   = ["iam:GetRole", "iam:PassRole"]
    resources = [aws_iam_role.training.arn]
    condition {
      test     = "StringEqualsIfExists"
      variable = "iam:PassedToService"
      values   = ["ec2.amazonaws.com"]
    }
  }
  statement {
    sid       = "ReadTrainingProfile"
    actions   = ["iam:GetInstanceProfile"]
    resources = [aws_iam_instance_profile.training.arn]
  }
}
