# One customer-managed key encrypts the bucket, Redis, the secrets and the logs.
resource "aws_kms_key" "broker" {
  description             = "${var.name}: checkpoints, Redis, secrets and logs"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.kms.json
}

resource "aws_kms_alias" "broker" {
  name          = "alias/${var.name}"
  target_key_id = aws_kms_key.broker.key_id
}

data "aws_iam_policy_document" "kms" {
  #checkov:skip=CKV_AWS_109:A key policy's "*" resource means this key only; the account-admin statement is AWS's default key policy.
  #checkov:skip=CKV_AWS_111:A key policy's "*" resource means this key only; the account-admin statement is AWS's default key policy.
  #checkov:skip=CKV_AWS_356:A key policy's "*" resource means this key only; the account-admin statement is AWS's default key policy.
  # The account administers the key; IAM policies grant its use to the roles.
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }

  # CloudWatch Logs needs the key policy itself to name it.
  statement {
    sid       = "CloudWatchLogsEncrypts"
    actions   = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["logs.${var.region}.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "kms:EncryptionContext:aws:logs:arn"
      values   = ["arn:${data.aws_partition.current.partition}:logs:${var.region}:${data.aws_caller_identity.current.account_id}:log-group:/${var.name}/*"]
    }
  }
}
