# The broker's settings, named exactly as in docs/deploy.md (## Settings).
locals {
  # SkyPilot launches training instances as this service account
  # (gcp.remote_identity in the SkyPilot config): spot-broker-training with
  # the default name (at most 30 characters: name is at most 21). Named after
  # var.name, as the broker's, so a second deployment in the project gets its own.
  training_account_id = "${var.name}-training"

  checkpoint_prefix = "checkpoints"
  checkpoint_root   = "gs://${google_storage_bucket.checkpoints.name}/${local.checkpoint_prefix}"
  broker_port       = 8000

  # Cloud Run's deterministic URL; computed rather than read from the service
  # so the service can be told its own address.
  public_url = "https://${var.name}-${data.google_project.this.number}.${var.region}.run.app"

  # Memorystore signs its TLS certificate with its own CA; the broker reads it
  # from a mounted secret (redis-py takes ssl_ca_certs from the URL).
  redis_ca_dir = "/etc/spot-broker/redis-ca"

  # ssl_check_hostname=false: the certificate is still verified against that CA, but not matched to the
  # host. Memorystore's server certificate names its IP in the subject CN only, with no IP subjectAltName
  # (envoyproxy/ratelimit#409: "GCP Memorystore which sets the CN to an IP address"), and OpenSSL matches
  # an IP against IP SANs alone, so redis-py (hostname checks on by default since 6.0, redis-py#3629)
  # refused every connection: "CERTIFICATE_VERIFY_FAILED ... IP address mismatch". The CA is the
  # instance's own, so a certificate it signed is this instance's.
  redis_tls_query = "ssl_ca_certs=${local.redis_ca_dir}/ca.pem&ssl_check_hostname=false"

  # Plain settings, passed as container environment.
  environment = {
    BROKER_CONFIG          = var.broker_config_path
    BROKER_CHECKPOINT_ROOT = local.checkpoint_root
    BROKER_PUBLIC_URL      = local.public_url
    BROKER_LAUNCHER        = "skypilot"
    BROKER_ENGINE          = "on"
    # the clouds priced: this module grants SkyPilot GCP alone, and an aws it priced would log
    # "clouds: aws has no price catalog" at every start and quote offers it cannot launch
    BROKER_CLOUDS = "gcp"
    # the instances the accounts may manage and autodown are named <cluster_prefix>-j-... (iam.tf): the broker
    # names them with the same prefix, so the two cannot disagree
    BROKER_CLUSTER_PREFIX = var.cluster_prefix
  }

  # Secret settings: one Secret Manager secret each, read by Cloud Run.
  # Keys must not depend on secret values (they drive for_each).
  secret_names = concat(
    ["BROKER_STORE_URL", "BROKER_ADMIN_TOKEN", "BROKER_TEAM_TOKENS", "BROKER_SECRETS_KEY", "BROKER_METRICS_TOKEN"],
    var.slack_enabled ? ["BROKER_SLACK_SIGNING_SECRET", "BROKER_SLACK_BOT_TOKEN"] : [],
  )

  secret_values = {
    BROKER_STORE_URL            = "rediss://:${google_redis_instance.store.auth_string}@${google_redis_instance.store.host}:${google_redis_instance.store.port}/0?${local.redis_tls_query}"
    BROKER_ADMIN_TOKEN          = random_password.admin_token.result
    BROKER_TEAM_TOKENS          = jsonencode({ for team in var.teams : team => random_password.team_token[team].result })
    BROKER_SECRETS_KEY          = random_id.secrets_key.b64_std
    BROKER_METRICS_TOKEN        = random_password.metrics_token.result
    BROKER_SLACK_SIGNING_SECRET = var.slack_signing_secret
    BROKER_SLACK_BOT_TOKEN      = var.slack_bot_token
  }
}

data "google_project" "this" {
  project_id = var.project_id
}

# `sky check gcp` also needs Cloud Resource Manager, off in new projects.
resource "google_project_service" "needed" {
  for_each = toset([
    "cloudresourcemanager.googleapis.com",
    "compute.googleapis.com",
    "iam.googleapis.com",
    "redis.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
  ])
  service            = each.value
  disable_on_destroy = false
}
