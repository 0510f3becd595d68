# The broker's shared store: Standard tier (a replica in another zone), AUTH,
# TLS with Memorystore's server CA.
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

  depends_on = [google_project_service.needed]
}
