"""The CLI's hint on a 401 for no token, against a broker that was given its admin token.

A broker given its admin token (``BROKER_ADMIN_TOKEN``, or ``admin_token_sha256`` in its config) writes no
``admin-token`` file, yet the hint said "or run this where `broker serve` wrote <data dir>/admin-token": the new user
went looking for a file that was nowhere. The file is named only when it is on this host; otherwise the hint says to
set BROKER_TOKEN to the admin token the broker was given, or a team token.
"""

import signal
import subprocess

from broker_testing import POOL_AND_SPOT, cli_runner, start_broker

TOKEN = "walk-dec6-admin-token-given-to-the-broker"
GIVEN = "set BROKER_TOKEN or --token to the admin token the broker was given, or a team token"


def _sha256(shell: str) -> str:
    """The digest as README's command computes it (``printf %s "$TOKEN" | sha256sum``), or another way."""
    out = subprocess.run(["bash", "-c", shell], env={"TOKEN": TOKEN, "PATH": "/usr/bin:/bin"}, capture_output=True,
                         text=True, check=True).stdout
    return out.split()[0]


def test_a_broker_given_its_admin_token_is_not_said_to_have_written_a_file(tmp_path):
    digest = _sha256('printf %s "$TOKEN" | sha256sum')
    assert _sha256('echo "$TOKEN" | sha256sum') != digest  # echo's line break is hashed too: a digest no token has
    data = tmp_path / "data"
    proc, url = start_broker(tmp_path, config=POOL_AND_SPOT + f'admin_token_sha256: ["{digest}"]\n',
                             env_extra={"BROKER_ADMIN_TOKEN": ""})  # the config's digest alone
    try:
        assert cli_runner(url, token=TOKEN)("status").returncode == 0  # README's digest is the token's
        assert not (data / "admin-token").exists()
        r = cli_runner(url, token=None)("status", check=False, extra_env={"BROKER_DATA_DIR": str(data)})
        assert r.returncode == 1 and r.stderr.startswith("error [401]: "), r.stderr
        # the data dir is said only as where a broker that made its own admin token keeps it: this one keeps none
        assert f"(no token was sent: {GIVEN}; or, if the broker made its own admin token (it was given none: no " \
            "BROKER_ADMIN_TOKEN, no admin_token_sha256), set BROKER_DATA_DIR to the data dir it was started with" \
            in r.stderr, r.stderr
        assert "admin-token" not in r.stderr and "wrote" not in r.stderr, r.stderr

        # a file that is there on this host, but holds no token (so none was sent), is named as what it is
        (data / "admin-token").write_text("\n")
        r = cli_runner(url, token=None)("status", check=False, extra_env={"BROKER_DATA_DIR": str(data)})
        assert r.returncode == 1 and f"(no token was sent; {data / 'admin-token'} holds no token: {GIVEN}; " \
            in r.stderr, r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
