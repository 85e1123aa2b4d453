variable "name" {
  description = "Required."
  type        = string
}

variable "asg_name" {
  description = "Required, and not passed by the broken caller."
  type        = string
}

variable "heartbeat_timeout" {
  description = "Optional."
  type        = number
  default     = 300
}
