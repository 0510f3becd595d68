# The broker's shared store: Standard tier (a replica in another zone), AUTH,
# TLS with Memorystore's server CA, hourly RDB snapshots (redis_persistence).
resource "google_redis_instance" "store" {
  name                    = "${var.name}-store"
  tier                    = "STANDARD_HA"
  memory_size_gb          = var.redis_memory_size_gb
  region                  = var.region
  redis_version           = "REDIS_7_2"
  authorized_network      = var.network
  connect_mode            = "DIRECT_PEERING"
  auth_enabled            = true
  transit_encryption_mode = "SERVER_AUTHENTICATION"

  # RDB snapshots (Memorystore for Redis, "About RDB snapshots"): the replica covers one node lost; a snapshot
  # covers both lost together, which otherwise restarts the store empty (every job, its events and costs gone).
  # Memorystore keeps only its latest snapshot, for its own recovery: export for a backup you restore yourself.
  persistence_config {
    persistence_mode    = var.redis_persistence ? "RDB" : "DISABLED"
    rdb_snapshot_period = var.redis_persistence ? "ONE_HOUR" : null
  }

  depends_on = [google_project_service.needed]
}
