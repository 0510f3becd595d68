"""Where the Terraform modules and their docs live, for the tests in this folder."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
MODULES = sorted(path for path in TERRAFORM.iterdir() if path.is_dir() and any(path.glob("*.tf")))
TF_FILES = sorted(TERRAFORM.rglob("*.tf"))


def rel(path: Path) -> str:
    """A path as the repository names it: terraform/aws/bucket.tf."""
    return str(path.relative_to(ROOT))
