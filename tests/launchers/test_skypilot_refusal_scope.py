"""SkyPilot's own refusals, read by :func:`launchers.skypilot.refusal_scope`: what each rules out for the job (a zone, a
cloud) or nothing, so the broker places it elsewhere (tests/broker/test_launch_refused_elsewhere.py drives that with
the local launcher). Here, as ``sky`` may be imported only under tests/launchers, with its fixture's HOME."""


def test_skypilots_refusals_say_what_they_rule_out(sky):
    from sky import exceptions as e

    from launchers.skypilot import refusal_scope

    assert refusal_scope(e.ResourcesUnavailableError("Failed to provision all possible launchable resources.")) == \
        "zone"
    assert refusal_scope(e.NoCloudAccessError("Cloud access is not set up. Run: sky check")) == "cloud"
    assert refusal_scope(e.CloudUserIdentityError("no AWS identity")) == "cloud"
    missing = ValueError('Failed to import dependencies for Kubernetes. Try running: pip install "skypilot[kubernetes]"')
    assert refusal_scope(missing) == "cloud"
    assert refusal_scope(ValueError("Invalid task YAML: unknown field")) is None
