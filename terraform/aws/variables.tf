variable "name" {
  type        = string
  description = "Prefix for every resource name (bucket, cluster, secrets, roles)."
  default     = "spot-broker"

  validation {
    # Resources it prefixes refuse a trailing dash (load balancer, target group, Cloud Run service) and
    # two dashes in a row (ElastiCache's replication group id).
    condition     = length(var.name) >= 3 && length(var.name) <= 21 && can(regex("^[a-z][a-z0-9]*(-[a-z0-9]+)*$", var.name))
    error_message = "name must be 3-21 characters: lowercase letters, digits and single dashes, starting with a letter and not ending with a dash."
  }
}

variable "region" {
  type        = string
  description = "AWS region for the broker, its Redis and its checkpoint bucket."

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.region))
    error_message = "region must look like us-east-1."
  }
}

variable "tags" {
  type        = map(string)
  description = "Tags added to every resource, on top of Application = var.name."
  default     = {}

  validation {
    condition     = length(var.tags) <= 40
    error_message = "AWS allows at most 50 tags per resource; keep 10 for the module."
  }
}

variable "vpc_id" {
  type        = string
  description = "VPC that holds the load balancer, the broker tasks and Redis."

  validation {
    condition     = can(regex("^vpc-[0-9a-f]{8,17}$", var.vpc_id))
    error_message = "vpc_id must look like vpc-0123456789abcdef0."
  }
}

variable "public_subnet_ids" {
  type        = list(string)
  description = "Public subnets (two zones or more) for the HTTPS load balancer."

  validation {
    condition     = length(var.public_subnet_ids) >= 2 && alltrue([for s in var.public_subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", s))])
    error_message = "public_subnet_ids needs at least two subnet-... ids, in different zones."
  }
}

variable "private_subnet_ids" {
  type        = list(string)
  description = "Private subnets (two zones or more, with a NAT route) for broker tasks and Redis."

  validation {
    condition     = length(var.private_subnet_ids) >= 2 && alltrue([for s in var.private_subnet_ids : can(regex("^subnet-[0-9a-f]{8,17}$", s))])
    error_message = "private_subnet_ids needs at least two subnet-... ids, in different zones."
  }
}

variable "allowed_ingress_cidrs" {
  type        = list(string)
  description = "CIDRs allowed to reach the load balancer on 443. Slack and training instances in other clouds must be inside them."
  default     = ["0.0.0.0/0"]

  validation {
    condition     = length(var.allowed_ingress_cidrs) > 0 && alltrue([for c in var.allowed_ingress_cidrs : can(cidrhost(c, 0))])
    error_message = "allowed_ingress_cidrs must be a non-empty list of IPv4 CIDRs."
  }
}

variable "domain_name" {
  type        = string
  description = "Public host name of the broker (covered by certificate_arn); BROKER_PUBLIC_URL is https://<domain_name>. Point a CNAME or alias at the load_balancer_dns_name output."

  validation {
    condition     = can(regex("^([a-z0-9]([a-z0-9-]*[a-z0-9])?\\.)+[a-z]{2,}$", var.domain_name))
    error_message = "domain_name must be a lowercase DNS name such as broker.example.com."
  }
}

variable "certificate_arn" {
  type        = string
  description = "ACM certificate for domain_name, in the same region, used by the HTTPS listener."

  validation {
    condition     = can(regex("^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/.+$", var.certificate_arn))
    error_message = "certificate_arn must be an ACM certificate ARN."
  }
}

variable "broker_image" {
  type        = string
  description = "Container image of the broker (with `broker` on PATH and the config file at broker_config_path)."

  validation {
    condition     = can(regex("^[^\\s]+(:[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})$", var.broker_image))
    error_message = "broker_image must name a tag or a digest, e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/spot-broker:0.1.0."
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

variable "desired_count" {
  type        = number
  description = "Number of broker tasks behind the load balancer."
  default     = 2

  validation {
    condition     = var.desired_count >= 2 && var.desired_count <= 20 && floor(var.desired_count) == var.desired_count
    error_message = "desired_count must be a whole number from 2 to 20 (two or more for availability)."
  }
}

variable "task_cpu" {
  type        = number
  description = "Fargate CPU units per broker task."
  default     = 1024

  validation {
    condition     = contains([512, 1024, 2048, 4096], var.task_cpu)
    error_message = "task_cpu must be one of 512, 1024, 2048, 4096."
  }
}

variable "task_memory" {
  type        = number
  description = "Fargate memory (MiB) per broker task; must be valid for task_cpu (1024 CPU takes 2048-8192). 4096: an idle broker with SkyPilot's API server holds about 1.2 GiB (the broker ~185 MB, 8 SkyPilot server processes at 110-180 MB each), SkyPilot's API server warns of 2 GB or less and wants more for its requests (sky/server/constants.py MIN_AVAIL_MEM_GB), and a workdir pack may unpack to 640 MiB."
  default     = 4096

  validation {
    condition     = var.task_memory >= 1024 && var.task_memory <= 30720 && var.task_memory % 1024 == 0
    error_message = "task_memory must be a multiple of 1024 from 1024 to 30720."
  }
}

variable "redis_node_type" {
  type        = string
  description = "ElastiCache node type for the broker's store (a primary and a replica in two zones)."
  default     = "cache.t4g.small"

  validation {
    condition     = can(regex("^cache\\.[a-z0-9]+\\.[a-z0-9]+$", var.redis_node_type))
    error_message = "redis_node_type must look like cache.t4g.small."
  }
}

variable "checkpoint_noncurrent_days" {
  type        = number
  description = "Days a replaced or deleted checkpoint version is kept before it expires."
  default     = 14

  validation {
    condition     = var.checkpoint_noncurrent_days >= 1 && var.checkpoint_noncurrent_days <= 365
    error_message = "checkpoint_noncurrent_days must be from 1 to 365."
  }
}

variable "log_retention_days" {
  type        = number
  description = "CloudWatch retention of the broker's logs, in days."
  default     = 365

  validation {
    condition     = contains([365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a CloudWatch retention value of one year or more (365, 400, 545, 731, ...)."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Protect the load balancer from deletion; set false before `terraform destroy`."
  default     = true
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

variable "launch_regions" {
  type        = list(string)
  description = "Regions where SkyPilot may launch training instances with the broker's role."
  default     = ["us-east-1", "us-east-2", "us-west-2"]

  validation {
    condition     = length(var.launch_regions) > 0 && alltrue([for r in var.launch_regions : can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", r))])
    error_message = "launch_regions must be a non-empty list of region names like us-east-1."
  }
}

variable "gpu_instance_types" {
  type        = list(string)
  description = "Instance type patterns (IAM StringLike) SkyPilot may launch, spot or on-demand."
  default     = ["g4dn.*", "g5.*", "g6.*", "g6e.*", "p3.*", "p4d.*", "p4de.*", "p5.*"]

  validation {
    condition     = length(var.gpu_instance_types) > 0 && alltrue([for t in var.gpu_instance_types : can(regex("^[a-z0-9-]+\\.[a-z0-9*]+$", t))])
    error_message = "gpu_instance_types must be patterns like g5.* or p4d.24xlarge."
  }
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
