# Checkpoint bucket: each job writes under checkpoints/<job-id>/.
resource "google_storage_bucket" "checkpoints" {
  #checkov:skip=CKV_GCP_62:Usage logs need a second, log-only bucket; Cloud Audit Logs (data access) are the audit trail if a project wants one.
  name                        = "${var.project_id}-${var.name}-ckpt" # at most 57 of the 63 characters allowed
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false

  versioning {
    enabled = true
  }

  # Versioning keeps an overwritten or deleted checkpoint for a while (an
  # accidental delete is recoverable), then the old version goes.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = var.checkpoint_noncurrent_days
    }
    action {
      type = "Delete"
    }
  }

  lifecycle_rule {
    condition {
      age = 2
    }
    action {
      type = "AbortIncompleteMultipartUpload"
    }
  }

  depends_on = [google_project_service.needed]
}
