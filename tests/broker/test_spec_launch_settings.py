"""Resource settings placement does not read but a launch hands to SkyPilot, held at submit to the types SkyPilot's
schema takes. Before, ``disk_size: []``, ``ports: {a: 1}`` or ``image_id: [1]`` were accepted and stored, and the
job failed only at launch, after it had waited in the queue and been placed."""

from __future__ import annotations

import pytest

from broker.spec import SpecError, parse

NOW = 1_800_000_000.0

REFUSED = [
    pytest.param({"disk_size": []}, "resources.disk_size", id="a disk size that is a list"),
    pytest.param({"disk_size": True}, "resources.disk_size", id="a disk size that is true"),
    pytest.param({"disk_size": -1}, "resources.disk_size", id="a negative disk size"),
    pytest.param({"disk_size": 10**30}, "resources.disk_size", id="a disk size past any cloud's"),
    pytest.param({"disk_size": "a\u0000b"}, "resources.disk_size", id="a disk size with a NUL"),
    pytest.param({"disk_size": "100 GB"}, "resources.disk_size", id="a disk size with a space before its unit"),
    pytest.param({"disk_tier": []}, "resources.disk_tier", id="a disk tier that is a list"),
    pytest.param({"network_tier": ""}, "resources.network_tier", id="an empty network tier"),
    pytest.param({"disk_tier": "superfast"}, "resources.disk_tier", id="a disk tier SkyPilot has not"),
    pytest.param({"disk_tier": "none"}, "resources.disk_tier", id="disk tier none, which its Resources refuses"),
    pytest.param({"network_tier": "ultra"}, "resources.network_tier", id="a network tier SkyPilot has not"),
    pytest.param({"any_of": [{"cpus": 2}, {"network_tier": "fast"}]}, "resources.any_of[1].network_tier",
                 id="a network tier SkyPilot has not in an any_of alternative"),
    pytest.param({"ports": {"a": 1}}, "resources.ports", id="ports as a mapping"),
    pytest.param({"ports": 0}, "resources.ports", id="port 0"),
    pytest.param({"ports": 70000}, "resources.ports", id="a port past 65535"),
    pytest.param({"ports": "9000-8000"}, "resources.ports", id="a port range that runs backwards"),
    pytest.param({"ports": [8888, "http"]}, "resources.ports", id="a list with a name in it"),
    pytest.param({"labels": ["team"]}, "resources.labels", id="labels as a list"),
    pytest.param({"labels": {"team": 5}}, "resources.labels", id="a label whose value is a number"),
    pytest.param({"image_id": [1]}, "resources.image_id", id="an image id that is a list"),
    pytest.param({"any_of": [{"cpus": 2}, {"cpus": 4, "disk_size": "big"}]}, "resources.any_of[1].disk_size",
                 id="a bad disk size in an any_of alternative"),
]

TAKEN = [
    pytest.param({"disk_size": 256}, id="a disk size in GB"),
    pytest.param({"disk_size": "1TB"}, id="a disk size with its unit"),
    pytest.param({"disk_size": "512gi"}, id="a disk size with a lower-case binary unit"),
    pytest.param({"disk_tier": "best", "network_tier": "standard"}, id="named tiers"),
    pytest.param({"disk_tier": "High", "network_tier": "BEST"}, id="named tiers in any case, as SkyPilot lowers them"),
    pytest.param({"ports": 8888}, id="one port"),
    pytest.param({"ports": "10000-10010"}, id="a port range"),
    pytest.param({"ports": [8888, "6006", "10000-10001"]}, id="a list of ports and ranges"),
    pytest.param({"labels": {"team": "vision"}}, id="labels"),
    pytest.param({"image_id": "docker:pytorch/pytorch:latest"}, id="an image name"),
]


@pytest.mark.parametrize("resources, field", REFUSED)
def test_a_setting_skypilot_would_refuse_at_launch_is_refused_at_submit_naming_it(resources, field):
    with pytest.raises(SpecError) as info:
        parse({"run": "echo hi", "resources": {"cpus": 2, **resources}}, now=NOW)
    assert info.value.field == field, info.value


@pytest.mark.parametrize("resources", TAKEN)
def test_a_setting_of_skypilots_types_is_taken(resources):
    assert parse({"run": "echo hi", "resources": {"cpus": 2, **resources}}, now=NOW) is not None


def test_a_tier_outside_skypilots_is_refused_in_words_that_name_the_value_and_the_ones_it_takes():
    with pytest.raises(SpecError) as info:
        parse({"run": "echo hi", "num_nodes": 2, "resources": {"accelerators": "A10G:1", "network_tier": "ultra"}},
              now=NOW)
    assert str(info.value) == "resources.network_tier: must be standard or best (SkyPilot's network tiers), not 'ultra'"


def test_the_tiers_taken_are_those_of_the_installed_skypilot():
    """Read from SkyPilot's source as text (``sky`` is imported only by the SkyPilot launcher and its tests): the
    names its ``DiskTier`` and ``NetworkTier`` enums hold, which its ``Resources`` checks a task's tiers against."""
    import ast
    import importlib.util
    from pathlib import Path

    from broker.spec import TIERS

    found = importlib.util.find_spec("sky")
    assert found is not None and found.submodule_search_locations, "SkyPilot is not installed"
    source = Path(next(iter(found.submodule_search_locations)), "utils", "resources_utils.py").read_text()
    enums = {node.name: tuple(v.value.value for v in node.body if isinstance(v, ast.Assign))
             for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}
    assert TIERS == {"disk_tier": enums["DiskTier"], "network_tier": enums["NetworkTier"]}
