terraform {
  # 1.7: the tests (tests/*.tftest.hcl) use mock_provider.
  required_version = ">= 1.7.0"

  required_providers {
    aws = {
      source = "hashicorp/aws"
      # 5.x and 6.x both provide every resource and argument used here.
      version = ">= 5.0, < 7.0"
    }
  }
}
