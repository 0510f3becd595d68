# Provider versions are pinned to a minor series: patch releases only, so a
# fresh `terraform init` a year from now plans the same resources.
terraform {
  required_version = ">= 1.6.0, < 2.0.0"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.14.0"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.6.0"
    }
  }
}

provider "google" {
  project        = var.project_id
  region         = var.region
  default_labels = merge(var.labels, { application = var.name })
}
