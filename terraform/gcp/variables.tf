variable "project_id" {
  type        = string
  description = "GCP project that holds the broker, its Redis, its bucket and the training instances."

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a GCP project id (6-30 lowercase letters, digits, dashes)."
  }
}

variable "region" {
  type        = string
  description = "Region for Cloud Run, Memorystore and the checkpoint bucket."

  validation {
    condition     = can(regex("^[a-z]+-[a-z]+[0-9]$", var.region))
    error_message = "region must look like us-central1."
  }
}

variable "name" {
  type        = string
  description = "Prefix for every resource name (service, bucket, secrets, accounts)."
  default     = "spot-broker"

  validation {
    # Resources it prefixes refuse a trailing dash (load balancer, target group, Cloud Run service) and
    # two dashes in a row (ElastiCache's replication group id).
    condition     = length(var.name) >= 3 && length(var.name) <= 21 && can(regex("^[a-z][a-z0-9]*(-[a-z0-9]+)*$", var.name))
    error_message = "name must be 3-21 characters: lowercase letters, digits and single dashes, starting with a letter and not ending with a dash."
  }
}

variable "labels" {
  type        = map(string)
  description = "Labels added to every resource, on top of application = var.name."
  default     = {}

  validation {
    condition     = alltrue([for k, v in var.labels : can(regex("^[a-z][a-z0-9_-]{0,62}$", k)) && can(regex("^[a-z0-9_-]{0,63}$", v))])
    error_message = "labels keys and values must be lowercase letters, digits, dashes and underscores (GCP label rules)."
  }
}

variable "network" {
  type        = string
  description = "VPC network (id or self link) that Memorystore peers with and Cloud Run egresses into."

  validation {
    condition     = can(regex("projects/[^/]+/global/networks/[^/]+$", var.network))
    error_message = "network must be a network id like projects/my-project/global/networks/default."
  }
}

variable "subnetwork" {
  type        = string
  description = "Subnetwork in region for Cloud Run's direct VPC egress (a /26 or larger with free addresses)."

  validation {
    condition     = can(regex("projects/[^/]+/regions/[^/]+/subnetworks/[^/]+$", var.subnetwork))
    error_message = "subnetwork must be a subnetwork id like projects/my-project/regions/us-central1/subnetworks/default."
  }
}

variable "broker_image" {
  type        = string
  description = "Container image of the broker (with `broker` on PATH and the config file at broker_config_path), e.g. in Artifact Registry."

  validation {
    condition     = can(regex("^[^\\s]+(:[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})$", var.broker_image))
    error_message = "broker_image must name a tag or a digest, e.g. us-docker.pkg.dev/my-project/broker/spot-broker:0.1.0."
  }
}

variable "broker_config_path" {
  type        = string
  description = "BROKER_CONFIG: path of the broker's YAML config (pools, teams, prices) inside the image."
  default     = "/etc/spot-broker/broker.yaml"

  validation {
    condition     = startswith(var.broker_config_path, "/")
    error_message = "broker_config_path must be an absolute path inside the container."
  }
}

variable "min_instances" {
  type        = number
  description = "Cloud Run instances kept running (each runs the reconcile loop, so CPU stays allocated)."
  default     = 2

  validation {
    condition     = var.min_instances >= 2 && floor(var.min_instances) == var.min_instances
    error_message = "min_instances must be a whole number, 2 or more (two or more for availability)."
  }
}

variable "max_instances" {
  type        = number
  description = "Upper bound on Cloud Run instances."
  default     = 6

  validation {
    condition     = var.max_instances >= 2 && var.max_instances <= 100 && floor(var.max_instances) == var.max_instances
    error_message = "max_instances must be a whole number from 2 to 100, and not below min_instances."
  }
}

variable "cpu" {
  type        = string
  description = "CPU limit of each Cloud Run instance."
  default     = "1"

  validation {
    condition     = contains(["1", "2", "4", "8"], var.cpu)
    error_message = "cpu must be one of 1, 2, 4, 8."
  }
}

variable "memory" {
  type        = string
  description = "Memory limit of each Cloud Run instance. 4Gi (1 CPU takes up to 4Gi; more needs cpu 2): an idle broker with SkyPilot's API server holds about 1.2 GiB (the broker ~185 MB, 8 SkyPilot server processes at 110-180 MB each), SkyPilot's API server warns of 2 GB or less and wants more for its requests (sky/server/constants.py MIN_AVAIL_MEM_GB), and Cloud Run's filesystem is in this memory (a workdir pack may unpack to 640 MiB)."
  default     = "4Gi"

  validation {
    condition     = can(regex("^[0-9]+(Mi|Gi)$", var.memory))
    error_message = "memory must look like 512Mi or 2Gi."
  }
}

variable "redis_memory_size_gb" {
  type        = number
  description = "Memorystore capacity (GiB) of the broker's store (Standard tier: a primary and a replica)."
  default     = 1

  validation {
    condition     = var.redis_memory_size_gb >= 1 && var.redis_memory_size_gb <= 300
    error_message = "redis_memory_size_gb must be from 1 to 300."
  }
}

variable "checkpoint_noncurrent_days" {
  type        = number
  description = "Days a replaced or deleted checkpoint version is kept before it is deleted."
  default     = 14

  validation {
    condition     = var.checkpoint_noncurrent_days >= 1 && var.checkpoint_noncurrent_days <= 365
    error_message = "checkpoint_noncurrent_days must be from 1 to 365."
  }
}

variable "teams" {
  type        = set(string)
  description = "Team names; each gets a generated token in BROKER_TEAM_TOKENS (read them from the team_tokens output)."

  validation {
    condition     = length(var.teams) > 0 && alltrue([for t in var.teams : can(regex("^[a-z][a-z0-9-]{0,39}$", t))])
    error_message = "teams must be a non-empty set of lowercase names (letters, digits, dashes)."
  }
}

variable "slack_enabled" {
  type        = bool
  description = "Store the Slack secrets and pass BROKER_SLACK_SIGNING_SECRET and BROKER_SLACK_BOT_TOKEN to the broker."
  default     = false
}

variable "slack_signing_secret" {
  type        = string
  description = "BROKER_SLACK_SIGNING_SECRET, from the Slack app's Basic Information page. Required when slack_enabled."
  default     = ""
  sensitive   = true

  validation {
    condition     = var.slack_signing_secret == "" || can(regex("^[0-9a-f]{32}$", var.slack_signing_secret))
    error_message = "slack_signing_secret must be empty or 32 hex characters."
  }
}

variable "slack_bot_token" {
  type        = string
  description = "BROKER_SLACK_BOT_TOKEN (xoxb-...), from the Slack app's OAuth page. Required when slack_enabled."
  default     = ""
  sensitive   = true

  validation {
    condition     = var.slack_bot_token == "" || startswith(var.slack_bot_token, "xoxb-")
    error_message = "slack_bot_token must be empty or a bot token starting with xoxb-."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Protect the Cloud Run service from deletion (the google provider's default since 6.0); set false and apply once before `terraform destroy`."
  default     = true
}

variable "redis_persistence" {
  type        = bool
  description = "RDB snapshots of the store every hour (Memorystore's persistence_config, on the Standard tier the module uses): a primary and replica lost together recover from the last snapshot rather than empty. Memorystore keeps them for its own recovery (no restore by hand: export for that). False turns them off and deletes them."
  default     = true
}

variable "cluster_prefix" {
  type        = string
  description = "The broker's cluster_prefix setting (its SkyPilot clusters are <cluster_prefix>-j-...; default broker): the training identity may stop and delete, and the broker's identity may manage, only instances of those clusters. Set it to the same value as the broker's config."
  default     = "broker"

  validation {
    # broker/config.py: up to 20 lowercase letters, digits and single hyphens, starting with a letter
    condition     = length(var.cluster_prefix) <= 20 && can(regex("^[a-z][a-z0-9]*(-[a-z0-9]+)*$", var.cluster_prefix))
    error_message = "cluster_prefix must be up to 20 lowercase letters, digits and single hyphens, starting with a letter (broker-staging), as the broker's cluster_prefix setting."
  }
}
