"""deploy/spot-broker.service runs one machine's broker under systemd: the unit must parse, run a real `broker`
command, come back after a crash, keep its data on a disk that lasts, and leave the local runners alone when it
stops the broker (they outlive it, and a broker that starts again adopts them)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

from terraform_paths import ROOT

UNIT = ROOT / "deploy" / "spot-broker.service"


def unit_sections(text: str) -> dict[str, dict[str, list[str]]]:
    """systemd's INI: ``[Section]``, ``Key=value`` (a key may repeat), ``#``/``;`` comments, no continuation used."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"line {number}: a setting before any [Section]"
        assert not line.endswith("\\"), f"line {number}: a continued line"
        key, sep, value = line.partition("=")
        assert sep and key.strip() and key.strip() == key.strip().replace(" ", ""), f"line {number}: {line!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def one(section: dict[str, list[str]], key: str) -> str:
    values = section.get(key, [])
    assert len(values) == 1, f"{key}: {values}"
    return values[0]


def environment(service: dict[str, list[str]]) -> dict[str, str]:
    pairs = {}
    for value in service.get("Environment", []):
        for word in shlex.split(value):
            name, _, setting = word.partition("=")
            pairs[name] = setting
    return pairs


def test_the_unit_has_the_sections_and_keys_a_service_needs():
    sections = unit_sections(UNIT.read_text())
    assert {"Unit", "Service", "Install"} <= set(sections)
    service = sections["Service"]
    assert one(service, "Restart") == "on-failure"
    assert one(sections["Install"], "WantedBy") == "multi-user.target"
    assert one(service, "User") not in ("root", "0"), "the broker needs no root"


def test_execstart_is_the_brokers_serve_command():
    from broker.cli import _parser

    argv = shlex.split(one(unit_sections(UNIT.read_text())["Service"], "ExecStart"))
    assert Path(argv[0]).is_absolute() and argv[0].endswith("/.venv/bin/broker"), argv[0]
    args = _parser().parse_args(argv[1:])
    assert args.command == "serve" and not args.no_engine


def test_stopping_the_broker_leaves_the_local_runs_running():
    """systemd's default KillMode=control-group kills every process of the unit on stop or restart: the local
    launcher's runners (their own session, but the unit's cgroup) and their jobs would die with the broker, and a
    restart would resume every job from its checkpoint. KillMode=process stops the broker alone."""
    import inspect

    from launchers import local

    assert one(unit_sections(UNIT.read_text())["Service"], "KillMode") == "process"
    launch = inspect.getsource(local)
    assert "start_new_session=True" in launch, "runners in the broker's session would take its SIGHUP/SIGINT too"


def test_the_data_dir_is_on_a_disk_that_lasts():
    """broker.db, the admin token and the secrets key live in the data dir: not /tmp, /run or /dev/shm."""
    data_dir = environment(unit_sections(UNIT.read_text())["Service"]).get("BROKER_DATA_DIR", "")
    assert data_dir.startswith("/") and not data_dir.startswith(("/tmp", "/run", "/dev/shm", "/var/tmp")), data_dir


def test_systemd_reads_the_unit_without_a_complaint(tmp_path):
    """systemd-analyze verify, on a copy whose ExecStart names this checkout's broker (the unit names /opt)."""
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: `make install-test` installs Debian's systemd package"
    venv_broker = ROOT / ".venv" / "bin" / "broker"
    assert venv_broker.is_file(), "the checkout's .venv has no broker"
    text = UNIT.read_text().replace("/opt/spot-broker/.venv/bin/broker", str(venv_broker))
    text = "\n".join(f"WorkingDirectory={ROOT}" if line.startswith("WorkingDirectory=") else line
                     for line in text.splitlines())
    copy = tmp_path / "spot-broker.service"
    copy.write_text(text + "\n")
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    complaints = [line for line in (result.stdout + result.stderr).splitlines() if str(copy) in line or "spot-broker" in line]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr
