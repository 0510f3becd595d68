# The broker on Cloud Run: min_instances instances, CPU always allocated so
# each runs the reconcile loop (BROKER_ENGINE=on); the shared Redis store makes
# their writes compare-and-set. Public: Slack and training instances in other
# clouds call it, and the broker authenticates every route itself.
resource "google_cloud_run_v2_service" "broker" {
  name     = var.name
  location = var.region
  ingress  = "INGRESS_TRAFFIC_ALL"
  # google provider 6.0 made it true by default, so `terraform destroy` failed on the service; the
  # variable keeps that default and says how to destroy (README: set it false and apply first).
  deletion_protection = var.deletion_protection

  template {
    service_account = google_service_account.broker.email

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    vpc_access {
      network_interfaces {
        network    = var.network
        subnetwork = var.subnetwork
      }
      egress = "PRIVATE_RANGES_ONLY"
    }

    containers {
      image = var.broker_image
      # No `command`: Cloud Run's command replaces the image's ENTRYPOINT, tini (deploy/Dockerfile), which
      # reaps the processes SkyPilot and the local runners leave behind; args replace CMD alone.
      args = ["broker", "serve", "--host", "0.0.0.0", "--port", tostring(local.broker_port)]

      ports {
        container_port = local.broker_port
      }

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        cpu_idle = false
      }

      dynamic "env" {
        for_each = local.environment
        content {
          name  = env.key
          value = env.value
        }
      }

      dynamic "env" {
        for_each = toset(local.secret_names)
        content {
          name = env.value
          value_source {
            # Cloud Run reads a secret when an instance starts: naming its version (not "latest")
            # makes a new value a new revision, so a rotated token rolls the instances.
            secret_key_ref {
              secret  = google_secret_manager_secret.broker[env.value].secret_id
              version = google_secret_manager_secret_version.broker[env.value].version
            }
          }
        }
      }

      volume_mounts {
        name       = "redis-ca"
        mount_path = local.redis_ca_dir
      }

      # Each probe waits up to 2 s for a stalled store before answering (PROBE_SECONDS, broker/api/probe.py),
      # so each timeout is longer than that: Cloud Run's default 1 s would read a slow store as a dead instance
      # (the startup probe would fail a new revision's start; the liveness probe would restart every instance).
      # Cloud Run takes a timeout of at most the probe's period.
      startup_probe {
        http_get {
          path = "/v1/readyz"
          port = local.broker_port
        }
        period_seconds    = 5
        timeout_seconds   = 4
        failure_threshold = 12
      }

      liveness_probe {
        http_get {
          path = "/v1/healthz"
          port = local.broker_port
        }
        period_seconds  = 15
        timeout_seconds = 5
      }
    }

    volumes {
      name = "redis-ca"
      secret {
        secret = google_secret_manager_secret.redis_ca.secret_id
        items {
          version = google_secret_manager_secret_version.redis_ca.version
          path    = "ca.pem"
        }
      }
    }
  }

  lifecycle {
    precondition {
      condition     = var.max_instances >= var.min_instances
      error_message = "max_instances must not be below min_instances."
    }
  }

  depends_on = [
    google_secret_manager_secret_version.broker,
    google_secret_manager_secret_version.redis_ca,
    google_secret_manager_secret_iam_member.broker,
    google_secret_manager_secret_iam_member.redis_ca,
  ]
}

resource "google_cloud_run_v2_service_iam_member" "public" {
  name     = google_cloud_run_v2_service.broker.name
  location = google_cloud_run_v2_service.broker.location
  role     = "roles/run.invoker"
  member   = "allUsers"
}
