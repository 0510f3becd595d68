"""A ``broker.checkpoint`` the checkpoint library would refuse, or write where a resume cannot find it, is refused at
submit, naming the field: it was accepted, placed and paid for, and failed inside the job with the library's
``ValueError``, diagnosed as the training script's error (so that a resume then needed ``--force``)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.spec import checkpoint_uri_problem
from checkpoint.storage import check_uri

from broker_testing import ADMIN

HEADERS = {"Authorization": f"Bearer {ADMIN}"}

# (uri, the broker refuses it, the library refuses it): the broker's rules are the library's (checkpoint/storage.py,
# check_uri) written again, since the broker may not import the library; one more is the broker's own
RULES = [
    pytest.param("s3://bucket/run", False, False, id="an S3 base is taken by both"),
    pytest.param("gs://bucket/run/", False, False, id="a GCS base is taken by both"),
    pytest.param("S3A://bucket/run", False, False, id="a scheme in capitals, s3a, is taken by both"),
    pytest.param("file:///data/ckpt", False, False, id="a file URL is taken by both"),
    pytest.param("/data/ckpt", False, False, id="an absolute path is taken by both"),
    pytest.param("~/ckpt", False, False, id="a path in the home folder is taken by both"),
    pytest.param("memory://ckpt", False, False, id="any scheme fsspec knows is taken by both"),
    pytest.param("s3:/bucket/run", True, True, id="a URL with one slash is refused by both"),
    pytest.param("gs:bucket/run", True, True, id="a URL with no slash is refused by both"),
    pytest.param("gs:///run", True, True, id="a bucket URL with no bucket is refused by both"),
    pytest.param("https://example.com/ckpt", True, True, id="plain HTTP is refused by both"),
    pytest.param("s4://bucket/run", True, True, id="a scheme fsspec does not know is refused by both"),
    pytest.param("s3//bucket/run", True, True, id="a URL missing its colon is refused by both"),
    pytest.param("relative/dir", True, False, id="a relative path is the broker's refusal alone"),
    pytest.param("file://relative/dir", True, False, id="a file URL of a relative path is the broker's refusal alone"),
    pytest.param("C:/ckpt", True, False, id="a Windows drive (a relative path here) is the broker's refusal alone"),
]


@pytest.mark.parametrize("uri, broker_refuses, library_refuses", RULES)
def test_the_broker_refuses_what_the_checkpoint_library_refuses_and_relative_paths(uri, broker_refuses, library_refuses):
    problem = checkpoint_uri_problem(uri)
    assert bool(problem) is broker_refuses, problem
    try:
        check_uri(uri)
    except ValueError as exc:
        assert library_refuses, exc
        assert problem == str(exc)  # the same words where the job would have failed
    else:
        assert not library_refuses


@pytest.fixture
def client(make_settings, store):
    with TestClient(create_app(make_settings(), store=store, engine=False), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("uri, says", [
    ("s3:/bucket/run", "a URL needs '//' after 's3:'"),
    ("relative/dir", "is a relative path: each attempt runs in a folder of its own"),
    ("s4://b/x", "unknown storage scheme 's4://'"),
], ids=["a URL with one slash", "a relative path", "an unknown scheme"])
def test_a_checkpoint_base_no_attempt_could_use_is_a_422_naming_the_field_and_nothing_is_stored(client, uri, says):
    r = client.post("/v1/jobs", json={"run": "echo hi", "broker": {"budget_usd": 1, "checkpoint": uri}}, headers=HEADERS)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "broker.checkpoint" and says in r.json()["detail"], r.text
    assert client.get("/v1/jobs", headers=HEADERS).json()["jobs"] == []
