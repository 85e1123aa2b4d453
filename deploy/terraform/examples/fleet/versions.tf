terraform {
  # 1.7: the tests (tests/*.tftest.hcl) use mock_provider.
  required_version = ">= 1.7.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # Pinned to the release the example is tested with, and locked in
      # .terraform.lock.hcl (commit both; refresh the lock for every
      # platform that runs it with `terraform providers lock -platform=...`).
      version = "~> 5.100.0"
    }
  }
}

provider "aws" {
  region = var.region
}
