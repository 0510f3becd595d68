# Two service accounts: the broker's (its bucket, its secrets, and what
# SkyPilot needs to launch GPU instances) and the one training instances run
# as (their checkpoint prefix, and stopping or deleting the broker's own
# clusters: SkyPilot's autostop/autodown runs on the cluster as this account).

locals {
  # Instance-level rights hold only on the broker's own clusters: SkyPilot names each
  # instance after the cluster (<cluster_prefix>-j-<job>-a<n>..., launchers/skypilot.py
  # cluster_name; the "-j-" keeps broker-staging's clusters out of broker's). Every
  # other resource type (the project, disks, firewalls, operations) is not narrowed
  # by it: the condition applies only where the resource is an instance.
  own_instances_only = "resource.type != 'compute.googleapis.com/Instance' || resource.name.extract('/instances/{name}').startsWith('${var.cluster_prefix}-j-')"
}

resource "google_service_account" "broker" {
  account_id   = "${var.name}-broker"
  display_name = "${var.name} broker (Cloud Run)"
  depends_on   = [google_project_service.needed]
}

resource "google_service_account" "training" {
  account_id   = local.training_account_id
  display_name = "${var.name} training instances: ${local.checkpoint_root}/ only"
  depends_on   = [google_project_service.needed]
}

resource "google_storage_bucket_iam_member" "broker_checkpoints" {
  bucket = google_storage_bucket.checkpoints.name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${google_service_account.broker.email}"
}

# Objects under checkpoints/ only; listing only with a checkpoints/ prefix.
resource "google_storage_bucket_iam_member" "training_checkpoints" {
  bucket = google_storage_bucket.checkpoints.name
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${google_service_account.training.email}"

  condition {
    title       = "checkpoint-prefix-only"
    description = "Objects under ${local.checkpoint_prefix}/ and listings of that prefix."
    expression  = "resource.name.startsWith('projects/_/buckets/${google_storage_bucket.checkpoints.name}/objects/${local.checkpoint_prefix}/') || api.getAttribute('storage.googleapis.com/objectListPrefix', '').startsWith('${local.checkpoint_prefix}/')"
  }
}

# SkyPilot's documented minimal GCP permissions, less iam.serviceAccounts.actAs
# on the whole project: the broker may only hand out the training account.
# `sky check gcp` (SkyPilot 0.14.1) asks testIamPermissions for every one of
# them but actAs, serviceusage.services.enable included
# (sky/provision/gcp/constants.py), and leaves GCP disabled if one is missing.
resource "google_project_iam_custom_role" "skypilot" {
  role_id     = "${replace(var.name, "-", "_")}_skypilot"
  title       = "${var.name} SkyPilot launcher"
  description = "Launch and tear down training instances through SkyPilot."
  permissions = [
    "compute.disks.create",
    "compute.disks.list",
    "compute.firewalls.create",
    "compute.firewalls.delete",
    "compute.firewalls.get",
    "compute.globalOperations.get",
    "compute.instances.create",
    "compute.instances.delete",
    "compute.instances.get",
    "compute.instances.list",
    "compute.instances.setLabels",
    "compute.instances.setMetadata",
    "compute.instances.setServiceAccount",
    "compute.instances.start",
    "compute.instances.stop",
    "compute.networks.get",
    "compute.networks.getEffectiveFirewalls",
    "compute.networks.list",
    "compute.projects.get",
    "compute.subnetworks.list",
    "compute.subnetworks.use",
    "compute.subnetworks.useExternalIp",
    "compute.zoneOperations.get",
    "iam.roles.get",
    "iam.serviceAccounts.get",
    "resourcemanager.projects.get",
    "resourcemanager.projects.getIamPolicy",
    "serviceusage.services.enable",
    "serviceusage.services.list",
    "serviceusage.services.use",
  ]
}

# compute.instances.* (setMetadata, which adds SSH keys, included) only on the broker's
# own instances. compute.instances.list cannot be narrowed: it is checked on the project.
resource "google_project_iam_member" "broker_skypilot" {
  project = var.project_id
  role    = google_project_iam_custom_role.skypilot.id
  member  = "serviceAccount:${google_service_account.broker.email}"

  condition {
    title       = "own-clusters-only"
    description = "Instances whose name begins with ${var.cluster_prefix}-j-; any other resource type."
    expression  = local.own_instances_only
  }
}

resource "google_service_account_iam_member" "broker_acts_as_training" {
  service_account_id = google_service_account.training.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.broker.email}"
}

# SkyPilot's autostop/autodown on the cluster (sky/skylet/events.py) calls
# sky/provision/gcp/instance.py stop_instances or terminate_instances as this account:
# instances.list (by the cluster's label), instances.stop or instances.delete, and
# zoneOperations.get to wait for them.
resource "google_project_iam_custom_role" "training_autodown" {
  role_id     = "${replace(var.name, "-", "_")}_training_autodown"
  title       = "${var.name} training autodown"
  description = "Stop or delete the broker's own clusters from the cluster itself (SkyPilot autostop/autodown)."
  permissions = [
    "compute.instances.delete",
    "compute.instances.list",
    "compute.instances.stop",
    "compute.zoneOperations.get",
  ]
}

resource "google_project_iam_member" "training_autodown" {
  project = var.project_id
  role    = google_project_iam_custom_role.training_autodown.id
  member  = "serviceAccount:${google_service_account.training.email}"

  condition {
    title       = "own-clusters-only"
    description = "Instances whose name begins with ${var.cluster_prefix}-j-; the listing and the operations."
    expression  = local.own_instances_only
  }
}
