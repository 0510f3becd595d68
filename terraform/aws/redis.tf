# The broker's shared store: a primary and a replica in two zones, TLS and AUTH.
resource "random_password" "redis_auth" {
  length  = 48
  special = false # the token sits inside BROKER_STORE_URL
}

resource "aws_elasticache_subnet_group" "store" {
  name       = "${var.name}-store"
  subnet_ids = var.private_subnet_ids
}

resource "aws_elasticache_replication_group" "store" {
  replication_group_id       = "${var.name}-store"
  description                = "${var.name} job store"
  engine                     = "redis"
  engine_version             = "7.1"
  node_type                  = var.redis_node_type
  port                       = 6379
  num_cache_clusters         = 2
  automatic_failover_enabled = true
  multi_az_enabled           = true
  subnet_group_name          = aws_elasticache_subnet_group.store.name
  security_group_ids         = [aws_security_group.store.id]
  at_rest_encryption_enabled = true
  kms_key_id                 = aws_kms_key.broker.arn
  transit_encryption_enabled = true
  auth_token                 = random_password.redis_auth.result
  snapshot_retention_limit   = 7
  apply_immediately          = false
}
