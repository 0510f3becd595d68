"""What the broker reads as a host path, SkyPilot must read as one too: checked against SkyPilot's own rule, which
may be imported only here (tests/conftest.py), under the ``sky`` fixture's HOME."""


def test_what_the_broker_reads_as_a_bucket_skypilot_reads_as_one_too(sky):
    """The admin-only rule for host paths holds only if the broker and SkyPilot agree on what is a path: SkyPilot
    uploads from the broker's host whatever it does not read as a store URL (a URL with a host part)."""
    from sky.data import data_utils

    from broker.spec import is_local_path

    for source in ("s3://bucket/data", "gs://b", "r2://b/x", "/srv/x://../key", "x:/../etc/key", "~/x://../.aws",
                   "relative/dir", "C:/x", "s3:/b"):
        assert is_local_path(source) == (not data_utils.is_cloud_store_url(source)), source
    assert not is_local_path("broker:checkpoint") and not is_local_path("sha256:" + "ab" * 32 + "/f")
