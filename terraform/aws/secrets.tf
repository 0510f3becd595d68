# One Secrets Manager entry per secret setting; ECS injects them by name.
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

resource "aws_secretsmanager_secret" "broker" {
  #checkov:skip=CKV2_AWS_57:Values are generated or pasted by Terraform; rotate by tainting the random_password (or updating the Slack variables) and applying, which also restarts the tasks.
  for_each                = toset(local.secret_names)
  name                    = "${var.name}/${lower(replace(trimprefix(each.key, "BROKER_"), "_", "-"))}"
  description             = "${each.key} for ${var.name}"
  kms_key_id              = aws_kms_key.broker.arn
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "broker" {
  for_each      = toset(local.secret_names)
  secret_id     = aws_secretsmanager_secret.broker[each.key].id
  secret_string = local.secret_values[each.key]

  lifecycle {
    precondition {
      condition     = !var.slack_enabled || (var.slack_signing_secret != "" && var.slack_bot_token != "")
      error_message = "slack_enabled is true: set slack_signing_secret and slack_bot_token."
    }
  }
}
