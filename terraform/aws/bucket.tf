# Checkpoint bucket: each job writes under checkpoints/<job-id>/.
resource "aws_s3_bucket" "checkpoints" {
  #checkov:skip=CKV_AWS_18:Access logging needs a second, log-only bucket; CloudTrail data events are the audit trail if an account wants one.
  #checkov:skip=CKV_AWS_144:Checkpoints are resumable scratch state; replicating every step to a second region doubles storage cost for no recovery gain.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events; the broker learns about checkpoints from the job's progress reports.
  bucket_prefix = "${var.name}-checkpoints-"
}

resource "aws_s3_bucket_ownership_controls" "checkpoints" {
  bucket = aws_s3_bucket.checkpoints.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "checkpoints" {
  bucket                  = aws_s3_bucket.checkpoints.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "checkpoints" {
  bucket = aws_s3_bucket.checkpoints.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "checkpoints" {
  bucket = aws_s3_bucket.checkpoints.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.broker.arn
    }
    bucket_key_enabled = true
  }
}

# Versioning keeps an overwritten or deleted checkpoint for a while (an
# accidental delete is recoverable), then the old version expires.
resource "aws_s3_bucket_lifecycle_configuration" "checkpoints" {
  bucket     = aws_s3_bucket.checkpoints.id
  depends_on = [aws_s3_bucket_versioning.checkpoints]

  rule {
    id     = "expire-old-checkpoint-versions"
    status = "Enabled"
    filter {} # the whole bucket holds checkpoints only
    noncurrent_version_expiration {
      noncurrent_days = var.checkpoint_noncurrent_days
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 2
    }
    expiration {
      expired_object_delete_marker = true
    }
  }
}

# TLS only, whoever asks.
resource "aws_s3_bucket_policy" "checkpoints" {
  bucket     = aws_s3_bucket.checkpoints.id
  policy     = data.aws_iam_policy_document.checkpoints_bucket.json
  depends_on = [aws_s3_bucket_public_access_block.checkpoints]
}

data "aws_iam_policy_document" "checkpoints_bucket" {
  statement {
    sid       = "DenyPlainHTTP"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.checkpoints.arn, "${aws_s3_bucket.checkpoints.arn}/*"]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}
