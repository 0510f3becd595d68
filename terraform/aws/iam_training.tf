# The role every training instance runs as: its checkpoint prefix, nothing else.
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
  description        = "Assumed by ${var.name} training instances: read and write ${local.checkpoint_root}/ only"
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
