# Broken on purpose: TestRejectsVariablesWithoutDescriptionOrType expects
# exactly these three problems.

variable "fine" {
  description = "Documented and typed."
  type        = string
}

variable "no_description" {
  type = string
}

variable "empty_description" {
  description = "  "
  type        = number
}

variable "no_type" {
  description = "Documented but untyped."
  default     = 3
}
