"""The reference checker itself: it must catch what the module tests rely on it to catch."""

import pytest

from hcl_model import ParseError, module_from_texts, problems

PROVIDERS = """
terraform {
  required_providers {
    aws = { source = "hashicorp/aws", version = "~> 5.80.0" }
  }
}
"""

BUCKET = """
variable "name" {
  type        = string
  description = "d"
}
resource "aws_s3_bucket" "b" {
  bucket = "${var.name}-x"
}
"""

CASES = [
    pytest.param(
        BUCKET + 'output "o" { value = aws_s3_bucket.b.arn }', [],
        id="a well-formed module has no problems",
    ),
    pytest.param(
        BUCKET + 'output "o" { value = var.nope }', ["var.nope is not declared"],
        id="an undeclared variable is reported",
    ),
    pytest.param(
        BUCKET + """
variable "lonely" {
  type = string
  validation {
    condition     = length(var.lonely) > 0
    error_message = "x"
  }
}
""",
        ["variable.lonely is declared but never used"],
        id="a variable read only by its own validation is reported as unused",
    ),
    pytest.param(
        BUCKET + 'output "o" { value = aws_s3_bucket.other.arn }', ["aws_s3_bucket.other is not defined"],
        id="a reference to an undefined resource is reported",
    ),
    pytest.param(
        BUCKET + 'output "o" { value = data.aws_iam_policy_document.p.json }',
        ["data.aws_iam_policy_document.p is not defined"],
        id="a reference to an undefined data source is reported",
    ),
    pytest.param(
        BUCKET + 'output "o" { value = aws_s3_bucket.b.dns_name }', ["aws_s3_bucket has no attribute 'dns_name'"],
        id="an attribute the type does not have is reported",
    ),
    pytest.param(
        BUCKET + 'output "o" { value = "s3://${aws_s3_bucket.b.nope}/x" }', ["has no attribute 'nope'"],
        id="a reference inside a string template is read",
    ),
    pytest.param(
        BUCKET + 'output "o" { value = "aws_s3_bucket.ghost.arn and var.ghost" }', [],
        id="reference-like text inside a string literal is ignored",
    ),
    pytest.param(
        BUCKET + 'output "o" { value = module.net.vpc_id }', ["module.net is not defined"],
        id="a reference to an undefined module is reported",
    ),
    pytest.param(
        BUCKET + 'output "o" { value = local.missing }', ["local.missing is not defined"],
        id="an undefined local is reported",
    ),
    pytest.param(
        BUCKET + 'locals { spare = 1 }', ["local.spare is defined but never used"],
        id="an unused local is reported",
    ),
    pytest.param(
        BUCKET + """
resource "aws_iam_role" "r" {
  for_each = toset(["a"])
  name     = each.key
}
output "o" { value = aws_iam_role.r.arn }
""",
        ["needs an index"],
        id="a for_each resource read without an index is reported",
    ),
    pytest.param(
        BUCKET + 'output "o" { value = aws_s3_bucket.b["x"].arn }', ["cannot be indexed"],
        id="a single resource read with an index is reported",
    ),
    pytest.param(
        BUCKET + """
resource "aws_shiny_thing" "t" {}
output "o" { value = aws_shiny_thing.t.arn }
""",
        ["no known attributes for aws_shiny_thing"],
        id="a type missing from the attribute table is reported, not trusted",
    ),
]


@pytest.mark.parametrize("text, expected", CASES)
def test_checker(text, expected):
    found = problems(module_from_texts({"versions.tf": PROVIDERS, "main.tf": text}))
    assert len(found) == len(expected), found
    for fragment, problem in zip(expected, found):
        assert fragment in problem


def test_a_syntax_error_names_the_file():
    with pytest.raises(ParseError, match="broken.tf"):
        module_from_texts({"broken.tf": 'resource "aws_s3_bucket" "b" {\n  bucket = \n'})
