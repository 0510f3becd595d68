"""What points the checkpoint tests' object stores at the loopback servers (moto_server, gcp-storage-emulator).

A module of its own, imported by name (``from loopback import cloud_env``): ``from conftest import ...`` found whichever
``conftest`` module was imported first in the worker — the launchers' one when a run began with their tests."""

from __future__ import annotations


def cloud_env(s3: str | None = None, gcs: str | None = None) -> dict[str, str]:
    """Variables that point s3fs / gcsfs at the loopback servers (and nowhere else)."""
    env = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "AWS_EC2_METADATA_DISABLED": "true"}
    if s3:
        env |= {"AWS_ENDPOINT_URL": s3, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                "AWS_DEFAULT_REGION": "us-east-1"}
    if gcs:
        env |= {"STORAGE_EMULATOR_HOST": gcs}
    return env
