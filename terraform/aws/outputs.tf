output "broker_url" {
  description = "BROKER_PUBLIC_URL: where teams, Slack and training jobs reach the broker."
  value       = local.public_url
}

output "load_balancer_dns_name" {
  description = "Point domain_name (CNAME or Route 53 alias) at this name."
  value       = aws_lb.broker.dns_name
}

output "checkpoint_bucket" {
  description = "Name of the checkpoint bucket."
  value       = aws_s3_bucket.checkpoints.bucket
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
  description = "Secret settings the broker runs with (name => Secrets Manager ARN)."
  value       = { for name in local.secret_names : name => aws_secretsmanager_secret.broker[name].arn }
}

output "redis_endpoint" {
  description = "Primary endpoint of the Redis store (TLS and AUTH; the full URL is the BROKER_STORE_URL secret)."
  value       = aws_elasticache_replication_group.store.primary_endpoint_address
}

output "training_instance_profile" {
  description = "Instance profile SkyPilot gives training instances (aws.remote_identity)."
  value       = aws_iam_instance_profile.training.name
}

output "broker_task_role_arn" {
  description = "Role the broker (and SkyPilot inside it) runs as."
  value       = aws_iam_role.task.arn
}

output "log_group" {
  description = "CloudWatch log group of the broker tasks."
  value       = aws_cloudwatch_log_group.broker.name
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
