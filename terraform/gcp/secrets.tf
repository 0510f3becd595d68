# One Secret Manager secret per secret setting, plus Redis's CA certificate.
resource "random_password" "admin_token" {
  length  = 48
  special = false
}

# /metrics is served with every other path (to the internet): it names the teams and what each spent.
resource "random_password" "metrics_token" {
  length  = 48
  special = false
}

resource "random_password" "team_token" {
  for_each = var.teams
  length   = 48
  special  = false
}

# Seals the tasks' secrets in Redis (AES-GCM, 32 bytes): every broker task shares it. Replacing it
# strands the jobs it sealed until the old key is given back (README: "The secrets key").
resource "random_id" "secrets_key" {
  byte_length = 32
}

resource "google_secret_manager_secret" "broker" {
  for_each  = toset(local.secret_names)
  secret_id = "${var.name}-${lower(replace(trimprefix(each.key, "BROKER_"), "_", "-"))}"

  replication {
    auto {}
  }

  depends_on = [google_project_service.needed]
}

resource "google_secret_manager_secret_version" "broker" {
  for_each    = toset(local.secret_names)
  secret      = google_secret_manager_secret.broker[each.key].id
  secret_data = local.secret_values[each.key]

  lifecycle {
    # A new value replaces the version, which the service names: the new one exists before the
    # service moves to it and the old one is destroyed after.
    create_before_destroy = true

    precondition {
      condition     = !var.slack_enabled || (var.slack_signing_secret != "" && var.slack_bot_token != "")
      error_message = "slack_enabled is true: set slack_signing_secret and slack_bot_token."
    }
  }
}

resource "google_secret_manager_secret_iam_member" "broker" {
  for_each  = toset(local.secret_names)
  secret_id = google_secret_manager_secret.broker[each.key].id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.broker.email}"
}

resource "google_secret_manager_secret" "redis_ca" {
  secret_id = "${var.name}-redis-ca"

  replication {
    auto {}
  }

  depends_on = [google_project_service.needed]
}

# Every CA Memorystore lists, in one PEM bundle (redis-py's ssl_ca_certs reads a bundle): five years after
# creation an instance lists the next CA beside the old one and later moves its server certificate to it
# (Memorystore for Redis, "Certificate Authority rotation"); with only server_ca_certs[0] mounted, every TLS
# connection fails from that move on. An apply after the new CA appears (the old one stays valid for years
# beside it) mounts both.
resource "google_secret_manager_secret_version" "redis_ca" {
  secret      = google_secret_manager_secret.redis_ca.id
  secret_data = join("\n", [for ca in google_redis_instance.store.server_ca_certs : trimspace(ca.cert)])

  lifecycle {
    create_before_destroy = true
  }
}

resource "google_secret_manager_secret_iam_member" "redis_ca" {
  secret_id = google_secret_manager_secret.redis_ca.id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.broker.email}"
}
