"""deploy/Dockerfile builds the image both modules run as ``broker_image``: what it installs, runs, serves and
reads must agree with pyproject.toml, the ``broker`` CLI, the API's routes and the modules.

No Docker engine runs here, so each check reads the Dockerfile (a small parser below: instructions, line
continuations, exec-form JSON) and compares it with the real thing: pyproject.toml read with tomllib, the
CLI's own argparse parser, the FastAPI app's routes answered over Starlette's TestClient, and the modules
read with python-hcl2 (hcl_model).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hcl_model import cached_module, unquote
from terraform_paths import MODULES, ROOT, TERRAFORM, rel

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
AWS = TERRAFORM / "aws"
GCP = TERRAFORM / "gcp"


def module_cases(sentence):
    return pytest.mark.parametrize("module_dir", MODULES, ids=[sentence.format(rel(p)) for p in MODULES])


# -- reading a Dockerfile -------------------------------------------------------------------------------

def instructions(text: str) -> list[tuple[str, str]]:
    """``[(INSTRUCTION, arguments)]``: comment lines dropped, ``\\`` continuations joined (a comment line
    inside a continued instruction is dropped too, as Docker does)."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        if whole:
            keyword, _, args = whole.partition(" ")
            out.append((keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def exec_form(args: str, what: str) -> list[str]:
    """A CMD / ENTRYPOINT / HEALTHCHECK CMD in exec form: a JSON list of strings (the shell form would run
    under /bin/sh -c, which does not forward SIGTERM to the broker: ECS and Cloud Run stop it with SIGKILL)."""
    try:
        argv = json.loads(args)
    except json.JSONDecodeError as error:
        raise AssertionError(f"{what} is not in exec form (a JSON list): {args!r}") from error
    assert isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv), f"{what}: {args!r}"
    return argv


def env_pairs(args: str) -> dict[str, str]:
    """``ENV A=1 B="two words"`` (the key=value form; the legacy ``ENV A 1`` is refused here)."""
    pairs = {}
    for word in shlex.split(args):
        key, sep, value = word.partition("=")
        assert sep, f"ENV {args!r}: write ENV key=value"
        pairs[key] = value
    return pairs


class Dockerfile:
    def __init__(self, text: str):
        self.steps = instructions(text)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.steps if kw == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None

    def env(self) -> dict[str, str]:
        merged: dict[str, str] = {}
        for args in self.all("ENV"):
            merged.update(env_pairs(args))
        return merged

    def cmd(self) -> list[str]:
        args = self.last("CMD")
        assert args, "the Dockerfile has no CMD"
        return exec_form(args, "CMD")

    def entrypoint(self) -> list[str]:
        args = self.last("ENTRYPOINT")
        return exec_form(args, "ENTRYPOINT") if args else []

    def copies(self) -> list[tuple[list[str], str]]:
        """``[(sources, destination)]`` of every COPY (flags such as --chown dropped)."""
        out = []
        for args in self.all("COPY"):
            words = [w for w in shlex.split(args) if not w.startswith("--")]
            assert len(words) >= 2, f"COPY {args!r}"
            out.append((words[:-1], words[-1]))
        return out

    def pip_installs(self) -> list[list[str]]:
        """The arguments of each ``pip install`` in a RUN (up to the next ``&&``, ``;`` or ``|``)."""
        found = []
        for args in self.all("RUN"):
            words = shlex.split(args)
            for i, word in enumerate(words):
                if word in ("pip", "pip3") or word.endswith("/pip"):
                    if i + 1 < len(words) and words[i + 1] == "install":
                        rest = []
                        for w in words[i + 2:]:
                            if w in ("&&", ";", "|", "||"):
                                break
                            rest.append(w)
                        found.append(rest)
        return found


def dockerfile() -> Dockerfile:
    return Dockerfile(DOCKERFILE.read_text())


def project_requirement(install: list[str]) -> tuple[str, set[str]]:
    """The ``.[a,b]`` argument of a pip install: the project and the extras it installs."""
    project = [w for w in install if re.fullmatch(r"\.(\[[^\]]*\])?", w)]
    assert len(project) == 1, f"no single '.[extras]' requirement in pip install {install}"
    match = re.fullmatch(r"\.(?:\[([^\]]*)\])?", project[0])
    return project[0], {e.strip() for e in (match.group(1) or "").split(",") if e.strip()}


def the_project_install() -> list[str]:
    installs = [i for i in dockerfile().pip_installs() if any(re.fullmatch(r"\.(\[[^\]]*\])?", w) for w in i)]
    assert len(installs) == 1, f"the Dockerfile should install the project once: {installs}"
    return installs[0]


# -- reading .dockerignore --------------------------------------------------------------------------------

def _pattern_regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern (Go's filepath.Match, plus ``**`` for any number of directories)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignore_rules() -> list[tuple[bool, re.Pattern]]:
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        rules.append((negated, _pattern_regex(pattern)))
    return rules


def ignored(path: str) -> bool:
    """Whether Docker leaves path (relative to the context) out: the last matching rule decides, and a
    path inside an excluded directory is excluded with it."""
    parts = path.strip("/").split("/")
    result = False
    for negated, regex in ignore_rules():
        if any(regex.fullmatch("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            result = not negated
    return result


# -- what the image installs ------------------------------------------------------------------------------

def test_the_base_image_runs_the_python_the_project_requires():
    from packaging.specifiers import SpecifierSet

    base = dockerfile().all("FROM")
    assert len(base) == 1, "one stage: the modules run the image the Dockerfile ends with"
    match = re.fullmatch(r"python:(\d+\.\d+)-slim(?:-\w+)?", base[0])
    assert match, f"FROM {base[0]}: expected python:3.11-slim"
    assert match.group(1) + ".0" in SpecifierSet(PYPROJECT["project"]["requires-python"])


def test_every_extra_the_image_installs_is_one_of_pyproject_toml():
    _, extras = project_requirement(the_project_install())
    declared = set(PYPROJECT["project"]["optional-dependencies"])
    assert extras - declared == set(), f"pyproject.toml has no extra {sorted(extras - declared)}"
    assert not extras & {"torch", "dev"}, "the broker never imports torch, and dev is the test suite's"


def needed_extras(module_dir: Path) -> set[str]:
    """The extras what a module sets makes the broker import: the store URL's scheme, the checkpoint
    root's, the launcher, and Slack when the module can pass its secrets."""
    module = cached_module(module_dir)
    needed = set()
    store_url = module.locals["secret_values"]["BROKER_STORE_URL"]
    if re.match(r'"?rediss?://', store_url):
        needed.add("redis")
    root = module.locals["checkpoint_root"]
    needed |= {"s3"} if root.startswith('"s3://') else {"gcs"} if root.startswith('"gs://') else set()
    if unquote(module.locals["environment"]["BROKER_LAUNCHER"]) == "skypilot":
        needed.add("skypilot")
    if "BROKER_SLACK_BOT_TOKEN" in str(module.locals["secret_names"]):
        needed.add("slack")
    return needed


@module_cases("the image installs every extra {} needs")
def test_the_image_installs_every_extra_a_module_needs(module_dir):
    needed = needed_extras(module_dir)
    assert len(needed) == 4, needed  # the store, the bucket, the launcher, Slack: a scheme not read above is new
    _, extras = project_requirement(the_project_install())
    assert needed - extras == set(), f"{rel(module_dir)} needs the extras {sorted(needed - extras)} in the image"


def test_the_image_installs_with_the_constraints_the_makefile_uses():
    makefile = (ROOT / "Makefile").read_text()
    constraints = re.search(r"^CONSTRAINTS\s*:=\s*(\S+)", makefile, re.M).group(1)
    install = the_project_install()
    flags = [install[i + 1] for i, w in enumerate(install[:-1]) if w in ("-c", "--constraint")]
    flags += [w.split("=", 1)[1] for w in install if w.startswith("--constraint=")]
    assert flags == [constraints], f"pip install {install}: expected -c {constraints}"
    assert (ROOT / constraints).is_file()
    copied = {src for sources, _ in dockerfile().copies() for src in sources}
    assert constraints in copied, f"the Dockerfile installs with {constraints} but does not COPY it"
    # Anything installed beside the project is pinned, as the constraints pin the rest.
    extra = [w for w in install if not w.startswith("-") and w not in (constraints,) and not w.startswith(".")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+(\[[\w,]+\])?==[\w.]+", w) for w in extra), extra


def test_what_it_installs_beside_the_project_is_from_skypilots_gcp_extra():
    """The image adds google-api-python-client for `sky check gcp` (SkyPilot's [gcp] extra, which pins
    protobuf<7 against the constraints' protobuf 7): the package must still be what that extra names."""
    from importlib.metadata import metadata

    gcp_extra = [r for r in metadata("skypilot").get_all("Requires-Dist") if 'extra == "gcp"' in r]
    named = {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in gcp_extra}
    extra = [w.split("==")[0].lower() for w in the_project_install() if "==" in w]
    assert set(extra) <= named, f"{extra} is not in SkyPilot's [gcp] extra {sorted(named)}"


def test_every_package_of_pyproject_and_its_readme_are_copied():
    """A non-editable install builds a wheel from what was copied: setuptools needs the README pyproject
    names, and a package left out would be missing from the image without an error at build time."""
    include = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = sorted(p.name for p in ROOT.iterdir()
                      if (p / "__init__.py").is_file() and any(fnmatchcase(p.name, pat) for pat in include))
    assert packages, include
    copied = {src.rstrip("/") for sources, _ in dockerfile().copies() for src in sources}
    needed = set(packages) | {"pyproject.toml", PYPROJECT["project"]["readme"]}
    assert needed - copied == set(), f"the Dockerfile does not COPY {sorted(needed - copied)}"


def test_what_the_dockerfile_copies_exists_and_is_in_the_build_context():
    for sources, _ in dockerfile().copies():
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: no such path in the repository"
            assert not ignored(src), f"COPY {src}: .dockerignore leaves it out of the build context"


@pytest.mark.parametrize("path", [".venv", ".venv-checkov", ".git", "tests", "artifacts", "tests/terraform/x.py",
                                  "terraform/aws/terraform.tfstate", "terraform/aws/.terraform",
                                  "broker/__pycache__/cli.cpython-311.pyc", "spot_broker.egg-info"])
def test_dockerignore_keeps_local_and_secret_files_out_of_the_context(path):
    assert ignored(path)


def test_dockerignore_reading_follows_docker_rules():
    """The reader above, on patterns whose meaning Docker's documentation gives."""
    assert _pattern_regex("**/*.go").fullmatch("a/b/c.go") and _pattern_regex("**/*.go").fullmatch("c.go")
    assert _pattern_regex("*/temp*").fullmatch("somedir/temporary.txt")
    assert not _pattern_regex("*/temp*").fullmatch("a/b/temp")
    assert _pattern_regex("temp?").fullmatch("tempa") and not _pattern_regex("temp?").fullmatch("temp/a")
    assert not ignored("broker/cli.py") and not ignored("pyproject.toml")


# -- what the image runs ----------------------------------------------------------------------------------

def parse_broker_argv(argv: list[str]):
    """The broker's own argparse parser reads argv (a wrong flag is its SystemExit, with its message)."""
    from broker.cli import _parser

    assert argv[0] in PYPROJECT["project"]["scripts"], f"{argv[0]!r} is not a console script of pyproject.toml"
    assert argv[0] == "broker"
    return _parser().parse_args(argv[1:])


# Inits that reap orphans as PID 1 and forward signals, by the Debian package that installs them (bookworm).
INITS = {"tini": "tini", "dumb-init": "dumb-init"}


def test_the_image_runs_the_broker_under_an_init_that_reaps_orphans():
    """The broker starts SkyPilot's API server and the local launcher's runners; their children, orphaned,
    are reparented to PID 1, which must reap them. The broker as PID 1 did not: zombies piled up. An init
    (tini, or dumb-init) as the ENTRYPOINT reaps them and forwards SIGTERM to the broker; ECS's `command`
    replaces CMD only, and Cloud Run cannot take `--init`, so the image carries it for both modules."""
    image = dockerfile()
    entrypoint = image.entrypoint()
    assert entrypoint, "no ENTRYPOINT: the broker runs as PID 1 and never reaps the orphans of its children"
    assert entrypoint[0] in INITS, f"ENTRYPOINT {entrypoint}: expected an init ({sorted(INITS)})"
    assert entrypoint[-1] == "--" or entrypoint[0] == "dumb-init", "end the init's options with --"
    runs = " ".join(image.all("RUN"))
    package = INITS[entrypoint[0]]
    assert re.search(rf"apt-get install [^&;]*\b{re.escape(package)}\b", runs), f"{package} is not installed"


def test_the_image_serves_the_api_on_its_exposed_port():
    image = dockerfile()
    args = parse_broker_argv(image.cmd())
    assert args.command == "serve" and args.host == "0.0.0.0" and not args.no_engine
    exposed = image.all("EXPOSE")
    assert exposed == [f"{args.port}"], f"EXPOSE {exposed}, but the broker serves on {args.port}"


def resolve(text: str, module_dir: Path) -> str:
    """An HCL string or ``${tostring(local.broker_port)}`` as the module means it."""
    port = str(cached_module(module_dir).locals["broker_port"])
    text = str(text)
    if re.fullmatch(r"(\$\{)?(tostring\()?local\.broker_port\)?\}?", text):
        return port
    return unquote(text)


def module_argv(module_dir: Path) -> list[str]:
    """What the container runs under the module, whole: ECS runs the image's ENTRYPOINT with its ``command`` (which
    replaces CMD); Cloud Run runs its ``command`` in place of the ENTRYPOINT (the ENTRYPOINT when it gives none)
    with its ``args`` in place of CMD."""
    module = cached_module(module_dir)
    entrypoint = dockerfile().entrypoint()
    if module_dir == AWS:
        text = module.resources[("aws_ecs_task_definition", "broker")]["container_definitions"]
        assert not re.search(r"\bentryPoint\s*=", text), "the container definition replaces the image's ENTRYPOINT"
        command = re.search(r"\bcommand\s*=\s*\[(.*?)\]", text, re.S)
        assert command, "the container definition has no command"
        return entrypoint + [resolve(word.strip(), module_dir) for word in command.group(1).split(",")]
    container = module.resources[("google_cloud_run_v2_service", "broker")]["template"][0]["containers"][0]
    command = [resolve(w, module_dir) for w in container["command"]] if "command" in container else entrypoint
    return command + [resolve(w, module_dir) for w in container.get("args", [])]


def module_port(module_dir: Path) -> int:
    module = cached_module(module_dir)
    if module_dir == AWS:
        text = module.resources[("aws_ecs_task_definition", "broker")]["container_definitions"]
        assert re.search(r"containerPort\s*=\s*local\.broker_port", text), "portMappings is not local.broker_port"
        assert module.resources[("aws_ecs_service", "broker")]["load_balancer"][0]["container_port"] == \
            "${local.broker_port}"
        assert module.resources[("aws_lb_target_group", "broker")]["port"] == "${local.broker_port}"
    else:
        container = module.resources[("google_cloud_run_v2_service", "broker")]["template"][0]["containers"][0]
        assert container["ports"][0]["container_port"] == "${local.broker_port}"
    return int(module.locals["broker_port"])


@module_cases("{} runs the image's command, under its init, on the image's port")
def test_the_module_runs_what_the_image_runs(module_dir):
    argv = module_argv(module_dir)
    image = dockerfile().entrypoint() + dockerfile().cmd()
    assert argv == image, f"{rel(module_dir)} runs {argv}, the image {image}"
    args = parse_broker_argv(argv[len(dockerfile().entrypoint()):])
    assert args.command == "serve" and args.port == module_port(module_dir)
    assert dockerfile().all("EXPOSE") == [str(module_port(module_dir))]


def health_paths(module_dir: Path) -> set[str]:
    module = cached_module(module_dir)
    if module_dir == AWS:
        checks = module.resources[("aws_lb_target_group", "broker")]["health_check"]
        assert all(unquote(c.get("matcher", '"200"')) == "200" for c in checks)
        return {unquote(c["path"]) for c in checks}
    container = module.resources[("google_cloud_run_v2_service", "broker")]["template"][0]["containers"][0]
    paths = set()
    for probe in ("startup_probe", "liveness_probe"):
        for block in container.get(probe, []):
            for get in block["http_get"]:
                assert resolve(get["port"], module_dir) == str(module_port(module_dir)), f"{probe} port"
                paths.add(unquote(get["path"]))
    return paths


def image_health_url() -> tuple[int, str]:
    args = dockerfile().last("HEALTHCHECK")
    assert args, "no HEALTHCHECK: `docker run` of the image would not say when the broker is up"
    argv = exec_form(args[args.index("CMD") + 3:].strip(), "HEALTHCHECK CMD")
    match = re.search(r"http://127\.0\.0\.1:(\d+)(/[\w/]*)", " ".join(argv))
    assert match, argv
    return int(match.group(1)), match.group(2)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """The real app on a SQLite store: the routes `broker serve` serves (the engine off: no tick is needed)."""
    from broker.api.app import create_app
    from broker.config import load_settings
    from broker.store import open_store

    data = tmp_path_factory.mktemp("dockerfile-api")
    settings = load_settings({"BROKER_DATA_DIR": str(data), "BROKER_ADMIN_TOKEN": "adm"})
    with TestClient(create_app(settings, store=open_store(f"sqlite://{data / 'broker.db'}"), engine=False),
                    raise_server_exceptions=False) as client:
        yield client


@module_cases("the paths {} probes are the API's, and answer 200 unauthenticated")
def test_the_module_probes_paths_the_api_serves(module_dir, api):
    paths = health_paths(module_dir)
    assert "/v1/healthz" in paths, paths  # a store outage must not restart every broker (docs/deploy.md)
    routes = {(route.path, method) for route in api.app.routes for method in getattr(route, "methods", ())}
    for path in paths:
        assert (path, "GET") in routes, f"{rel(module_dir)} probes {path}, which the API does not serve"
        answer = api.get(path)
        assert answer.status_code == 200, f"GET {path}: {answer.status_code} {answer.text}"


def test_the_image_healthcheck_asks_the_served_port_and_the_modules_path(api):
    port, path = image_health_url()
    assert port == parse_broker_argv(dockerfile().cmd()).port
    assert path in health_paths(AWS) and path in health_paths(GCP)
    assert api.get(path).status_code == 200


# -- what the image reads, and as whom -----------------------------------------------------------------------

@module_cases("the image's BROKER_CONFIG is {}'s default broker_config_path")
def test_the_config_path_is_the_modules_default(module_dir):
    default = unquote(cached_module(module_dir).variables["broker_config_path"]["default"])
    assert dockerfile().env().get("BROKER_CONFIG") == default
    assert cached_module(module_dir).locals["environment"]["BROKER_CONFIG"] == "${var.broker_config_path}"


def test_the_image_runs_as_a_user_with_a_writable_home_not_root():
    image = dockerfile()
    user = image.last("USER")
    assert user and user.split(":")[0] not in ("root", "0"), f"USER {user}"
    last_user = max(i for i, (kw, _) in enumerate(image.steps) if kw == "USER")
    assert all(kw != "RUN" for kw, _ in image.steps[last_user:]), "a RUN after USER would run as the broker"
    useradd = " ".join(image.all("RUN"))
    uid = user.split(":")[0]
    assert re.search(rf"useradd\b[^&;]*--create-home[^&;]*--uid {uid}\b", useradd), \
        "SkyPilot writes ~/.sky and ~/.ssh: the user needs a home"


def test_skypilots_run_time_tools_are_installed():
    """ssh and rsync reach and fill the clusters SkyPilot launches; `sky check aws` runs `aws --version`,
    and `sky check gcp` looks for `gcloud` (installed with WITH_GCLOUD=true)."""
    from importlib.util import find_spec

    sky = Path(find_spec("sky").origin).parent
    assert "aws --version" in (sky / "clouds" / "aws.py").read_text()
    assert "shutil.which('gcloud')" in (sky / "clouds" / "gcp.py").read_text()
    runs = " ".join(dockerfile().all("RUN"))
    for package in ("openssh-client", "rsync", "awscli", "google-cloud-cli"):
        assert re.search(rf"apt-get install [^&;]*\b{package}\b", runs), f"{package} is not installed"
    assert "WITH_GCLOUD=false" in dockerfile().all("ARG")


# -- the module READMEs build it -----------------------------------------------------------------------------

def before_you_apply(module_dir: Path) -> str:
    text = (module_dir / "README.md").read_text()
    match = re.search(r"^## Before you apply\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match, f"{rel(module_dir)}/README.md has no '## Before you apply'"
    return match.group(1)


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.M | re.S)


@module_cases("{}/README.md builds deploy/Dockerfile and puts the config where the image reads it")
def test_the_readme_builds_the_image(module_dir):
    section = before_you_apply(module_dir)
    shell = fenced(section, "sh")
    assert shell, "no ```sh block"
    for block in shell:
        checked = subprocess.run(["bash", "-n"], input=block, text=True, capture_output=True)
        assert checked.returncode == 0, f"bash -n: {checked.stderr}\n{block}"
    commands = [shlex.split(line) for block in shell for line in block.replace("\\\n", " ").splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    builds = [c for c in commands if c[:2] == ["docker", "build"]]
    base = [c for c in builds if "-f" in c and c[c.index("-f") + 1] == "deploy/Dockerfile"]
    assert len(base) == 1 and base[0][-1] == ".", "build deploy/Dockerfile once, with the repository as context"
    assert all("--platform" in c and c[c.index("--platform") + 1] == "linux/amd64" for c in builds), \
        "Fargate (X86_64) and Cloud Run run linux/amd64 images: a build on an arm64 laptop must say so"
    gcloud = f"WITH_GCLOUD={'true' if module_dir == GCP else 'false'}"
    passed = [c[i + 1] for c in base for i, w in enumerate(c[:-1]) if w == "--build-arg"]
    assert (gcloud in passed) == (module_dir == GCP), passed
    base_tag = base[0][base[0].index("-t") + 1]

    derived = fenced(section, "dockerfile")
    assert len(derived) == 1, "one ```dockerfile block: the image with the config in it"
    image = Dockerfile(derived[0])
    assert image.all("FROM") == [base_tag], f"the derived image should start FROM {base_tag}"
    destinations = {dest for _, dest in image.copies()}
    config = unquote(cached_module(module_dir).variables["broker_config_path"]["default"])
    assert config in destinations, f"nothing is copied to broker_config_path ({config})"
    assert "/home/broker/.sky/config.yaml" in destinations, "SkyPilot's config (remote_identity) is not copied"
    home = re.search(r"--home-dir (\S+)", " ".join(dockerfile().all("RUN"))).group(1)
    assert home == "/home/broker"
    identity = "aws:\n  remote_identity:" if module_dir == AWS else "gcp:\n  remote_identity:"
    assert any(identity in block for block in fenced(section, "yaml")), f"no SkyPilot config with {identity!r}"
    pushes = [c for c in commands if c[:2] == ["docker", "push"]]
    assert pushes, "the image is never pushed"
