# Broken on purpose: passes an input the module does not declare and omits the
# required asg_name. TestRejectsBadModuleCall expects both.
module "autodiag" {
  source = "../module"

  name         = "fleet"
  not_an_input = true

  depends_on = [terraform_data.unrelated]
}

# Another module: must be ignored by the check.
module "other" {
  source = "../../elsewhere"

  whatever = 1
}
