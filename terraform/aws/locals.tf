# The broker's settings, named exactly as in docs/deploy.md (## Settings).
locals {
  # SkyPilot launches training instances with this instance profile
  # (aws.remote_identity in the SkyPilot config): spot-broker-training with
  # the default name. Named after var.name, as the other roles, so a second
  # deployment in the account (staging, another region) gets its own.
  training_role_name = "${var.name}-training"

  checkpoint_prefix = "checkpoints"
  checkpoint_root   = "s3://${aws_s3_bucket.checkpoints.bucket}/${local.checkpoint_prefix}"
  public_url        = "https://${var.domain_name}"
  broker_port       = 8000

  # Plain settings, passed as container environment.
  environment = {
    BROKER_CONFIG          = var.broker_config_path
    BROKER_CHECKPOINT_ROOT = local.checkpoint_root
    BROKER_PUBLIC_URL      = local.public_url
    BROKER_LAUNCHER        = "skypilot"
    BROKER_ENGINE          = "on"
    # the clouds priced: this module grants SkyPilot AWS alone, and a gcp it priced would log
    # "clouds: gcp has no price catalog" at every start (the image ships AWS's prices only)
    BROKER_CLOUDS = "aws"
    # where the task role may launch (iam_broker.tf): the broker places cloud attempts only there, rather
    # than quote an offer IAM then refuses at launch
    BROKER_LAUNCH_REGIONS = join(",", var.launch_regions)
    BROKER_INSTANCE_TYPES = join(",", var.gpu_instance_types)
    # the clusters the roles may manage and autodown are named <cluster_prefix>-j-... (iam_*.tf): the broker
    # names them with the same prefix, so the two cannot disagree
    BROKER_CLUSTER_PREFIX = var.cluster_prefix
  }

  # Secret settings: one Secrets Manager entry each, injected by ECS.
  # Keys must not depend on secret values (they drive for_each).
  secret_names = concat(
    ["BROKER_STORE_URL", "BROKER_ADMIN_TOKEN", "BROKER_TEAM_TOKENS", "BROKER_SECRETS_KEY", "BROKER_METRICS_TOKEN"],
    var.slack_enabled ? ["BROKER_SLACK_SIGNING_SECRET", "BROKER_SLACK_BOT_TOKEN"] : [],
  )

  secret_values = {
    BROKER_STORE_URL            = "rediss://:${random_password.redis_auth.result}@${aws_elasticache_replication_group.store.primary_endpoint_address}:6379/0"
    BROKER_ADMIN_TOKEN          = random_password.admin_token.result
    BROKER_TEAM_TOKENS          = jsonencode({ for team in var.teams : team => random_password.team_token[team].result })
    BROKER_SECRETS_KEY          = random_id.secrets_key.b64_std
    BROKER_METRICS_TOKEN        = random_password.metrics_token.result
    BROKER_SLACK_SIGNING_SECRET = var.slack_signing_secret
    BROKER_SLACK_BOT_TOKEN      = var.slack_bot_token
  }
}

data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}
