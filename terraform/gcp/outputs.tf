output "broker_url" {
  description = "BROKER_PUBLIC_URL: where teams, Slack and training jobs reach the broker."
  value       = local.public_url
}

output "cloud_run_uri" {
  description = "The URL Cloud Run reports for the service (serves the same broker as broker_url)."
  value       = google_cloud_run_v2_service.broker.uri
}

output "checkpoint_bucket" {
  description = "Name of the checkpoint bucket."
  value       = google_storage_bucket.checkpoints.name
}

output "checkpoint_root" {
  description = "BROKER_CHECKPOINT_ROOT: each job writes under <root>/<job-id>/."
  value       = local.checkpoint_root
}

output "environment" {
  description = "Plain settings the broker runs with (name => value), as in docs/deploy.md."
  value       = local.environment
}

output "secret_environment" {
  description = "Secret settings the broker runs with (name => Secret Manager secret id)."
  value       = { for name in local.secret_names : name => google_secret_manager_secret.broker[name].id }
}

output "redis_host" {
  description = "Memorystore host of the store (TLS and AUTH; the full URL is the BROKER_STORE_URL secret)."
  value       = google_redis_instance.store.host
}

output "training_service_account" {
  description = "Service account SkyPilot gives training instances (gcp.remote_identity)."
  value       = google_service_account.training.email
}

output "broker_service_account" {
  description = "Service account the broker (and SkyPilot inside it) runs as."
  value       = google_service_account.broker.email
}

output "admin_token" {
  description = "BROKER_ADMIN_TOKEN (terraform output -raw admin_token)."
  value       = random_password.admin_token.result
  sensitive   = true
}

output "metrics_token" {
  description = "BROKER_METRICS_TOKEN, Prometheus's bearer token for /metrics (terraform output -raw metrics_token)."
  value       = random_password.metrics_token.result
  sensitive   = true
}

output "team_tokens" {
  description = "Each team's bearer token (team => token), the contents of BROKER_TEAM_TOKENS."
  value       = { for team in var.teams : team => random_password.team_token[team].result }
  sensitive   = true
}
