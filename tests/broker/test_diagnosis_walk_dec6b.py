"""Failures an ML engineer walked through on Dec 6 (second walk), run for real under the local launcher and diagnosed
as the engine does.

What the walk found: an import of the user's own package that was not in the workdir (``from mynet.blocks import
Net``) was told "pip install mynet", which installs whatever PyPI has under that name; a bad command-line argument
(argparse's exit 2) was quoted and then sent to "Read the end of its log for the cause"; numpy's "Unable to allocate
64.0 GiB" lost its size ("an allocation failed"); and a script that sent itself SIGKILL was said to be killed "most
likely by the kernel for lack of host memory", which nothing in its log showed.
"""

from __future__ import annotations

import textwrap

import pytest
from broker_testing import wait_for

from broker.diagnosis import Ending, diagnose
from broker.engine.reconcile import ENDED_PHASE_NAME
from launchers.base import LaunchRequest
from launchers.local import LocalLauncher

ARGPARSE_SCRIPT = textwrap.dedent("""\
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--data", required=REQUIRED)
    args = parser.parse_args()
    print("step", args.steps)
    """)
CLICK_SCRIPT = textwrap.dedent("""\
    import click

    @click.command()
    @click.option("--steps", type=int, default=10)
    def main(steps):
        print("step", steps)

    main()
    """)
OWN_CODE_HINT = ("If mynet is your own code, check that it is in the task's workdir (and not left out by a .gitignore "
                 "or .skyignore, which the upload follows) and on the import path (the run starts in the workdir; a "
                 "package elsewhere needs PYTHONPATH or pip install -e); otherwise add the package that provides it "
                 "to the task's setup. Then submit the task again.")
ARGS_HINT = ("A resume runs the same command and fails the same way: fix the task's run command (or the file it reads "
             "its arguments from) and submit the task again; if the argument comes from one of the task's envs, "
             "resume with that env changed instead (broker resume JOB --env NAME=value).")
UNCONFIRMED_HINT = ("If memory ran out (the node's kernel log, dmesg, says \"Out of memory: Killed process\"): use a "
                    "larger instance, fewer data-loader workers, or a smaller batch size. A SIGKILL also comes from a "
                    "person or a tool on the node (kill -9), or from the script itself.")


@pytest.fixture
def run_locally(tmp_path):
    """Run a task (its workdir made of ``files``) as a real attempt under the local launcher; its diagnosis."""
    launcher = LocalLauncher(tmp_path / "runs")
    count = iter(range(1, 100))

    def run(run: str, files: dict[str, str]) -> tuple:
        workdir = tmp_path / f"work{next(count)}"
        workdir.mkdir()
        for name, text in files.items():
            (workdir / name).write_text(text)
        attempt_id = f"j-walk-a{workdir.name}"
        launcher.launch(LaunchRequest(attempt_id, "j-walk", 1, {"workdir": str(workdir), "run": run}, {}))
        try:
            status = wait_for(lambda: (s := launcher.status(attempt_id)).phase.is_final and s, timeout=90)
            log = launcher.logs(attempt_id, limit=1 << 22)[0].decode()
        finally:
            launcher.kill(attempt_id)
        ending = Ending(ENDED_PHASE_NAME.get(status.phase, status.phase.value), status.exit_code, status.signal,
                        status.reason, log[-16_384:], command=status.step)
        return diagnose(ending), log

    return run


@pytest.mark.parametrize("run, files, cls, sentence, hint", [
    pytest.param("python localimp.py", {"localimp.py": "from mynet.blocks import Net\n"},
                 "dependency_missing", "The job could not import mynet: Python found no module of that name.",
                 OWN_CODE_HINT,
                 id="an import of the user's own package missing from the workdir says to check the workdir, not to "
                    "pip install that name"),
    pytest.param("python train.py --stepz 100", {"train.py": ARGPARSE_SCRIPT.replace("REQUIRED", "False")},
                 "bad_arguments", "The run command passes train.py arguments it does not take: --stepz 100 "
                                  "(argparse's usage error).", ARGS_HINT,
                 id="an argument the script does not take is named as the run command's, to fix there"),
    pytest.param("python train.py --steps 100", {"train.py": ARGPARSE_SCRIPT.replace("REQUIRED", "True")},
                 "bad_arguments", "The run command leaves out arguments that train.py requires: --data (argparse's "
                                  "usage error).", ARGS_HINT,
                 id="a required argument the run command leaves out is named"),
    pytest.param("python train.py --steps ten", {"train.py": ARGPARSE_SCRIPT.replace("REQUIRED", "False")},
                 "bad_arguments", "The run command gives train.py an argument it does not accept: argument --steps: "
                                  "invalid int value: 'ten' (argparse's usage error).", ARGS_HINT,
                 id="a value argparse cannot convert is named with its argument"),
    pytest.param("python train.py --stepz 100", {"train.py": CLICK_SCRIPT},
                 "bad_arguments", "The run command passes the script an argument it does not accept (click's "
                                  "usage error): No such option: --stepz (Possible options: --help, --steps).",
                 ARGS_HINT,
                 id="click's unknown option is a bad argument too"),
    pytest.param("ulimit -v 4000000; python -c \"import numpy; print('step 3', flush=True); "
                 "numpy.ones(8 * 1024 ** 3)\"", {},
                 "host_oom", "Out of host memory after step 3 (the last in the job's log): the job could not allocate 64.0 GiB.",
                 "Use a larger instance, fewer data-loader workers, or a smaller batch size.",
                 id="numpy's failed allocation keeps its size in the sentence"),
    pytest.param("python -c \"import os; print('step 5', flush=True); os.kill(os.getpid(), 9)\"", {},
                 "host_oom", "The process was killed by SIGKILL after step 5 (the last in the job's log): often the kernel's out-of-memory killer, "
                             "but nothing in the log confirms it.", UNCONFIRMED_HINT,
                 id="a SIGKILL with no out-of-memory evidence in the log is not said to be the kernel's"),
])
def test_the_walks_failures_are_told_as_what_they_are(run_locally, run, files, cls, sentence, hint):
    d, log = run_locally(run, files)
    assert (d.cls, d.sentence, d.hint) == (cls, sentence, hint), log[-2000:]
    assert d.infrastructure is False


@pytest.mark.parametrize("module, sentence, hint", [
    pytest.param("mynet", "The job could not import mynet: Python found no module of that name.", OWN_CODE_HINT,
                 id="a name no list knows may be the user's own code: no pip install of it is offered"),
    pytest.param("mynet.blocks", "The job could not import mynet.blocks: Python found no module of that name.",
                 OWN_CODE_HINT.replace("If mynet is", "If mynet.blocks is"),
                 id="a module inside a package no list knows is named whole"),
    pytest.param("einops", "A Python dependency is missing: einops.", "Add it to the task's setup: pip install einops.",
                 id="a well-known package is still told to pip by its name"),
    pytest.param("torch.distributed.fsdp", "A Python dependency is missing: torch.distributed.fsdp.",
                 "Add it to the task's setup: pip install torch (a version of it that has torch.distributed.fsdp; an "
                 "older one may be installed).",
                 id="a module inside a well-known package asks for a version of that package"),
    pytest.param("cv2", "A Python dependency is missing: cv2.",
                 "Add it to the task's setup: pip install opencv-python (the package cv2 comes in).",
                 id="an import whose PyPI name the table knows is told to pip by that name"),
])
def test_a_missing_module_offers_pip_install_only_for_a_name_it_knows(module, sentence, hint):
    d = diagnose(Ending("failed", 1, log_tail=f'Traceback (most recent call last):\n  File "train.py", line 1, in '
                                              f"<module>\nModuleNotFoundError: No module named '{module}'\n"))
    assert (d.cls, d.sentence, d.hint) == ("dependency_missing", sentence, hint)


@pytest.mark.parametrize("ending, sentence, hint_has", [
    pytest.param(Ending("failed", 2, log_tail="usage: torchrun [-h] [--nnodes NNODES] ...\ntorchrun: error: "
                                              "unrecognized arguments: --nproc-per-nodee 2\n"),
                 "The run command passes torchrun arguments it does not take: --nproc-per-nodee 2 (argparse's usage "
                 "error).", "fix the task's run command",
                 id="torchrun's own parser refusing its flag is named as torchrun's"),
    pytest.param(Ending("failed", 2, command="setup",
                        log_tail="usage: prep.py [-h] --out OUT\nprep.py: error: the following arguments are "
                                 "required: --out\n"),
                 "The setup command leaves out arguments that prep.py requires: --out (argparse's usage error).",
                 "fix the task's setup command",
                 id="a script the setup runs is the setup command's to fix"),
    pytest.param(Ending("failed", 1, log_tail='Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n'
                                              "RuntimeError: [enforce fail at alloc_cpu.cpp:83] . DefaultCPUAllocator: "
                                              "can't allocate memory: you tried to allocate 68719476736 bytes. Error "
                                              "code 12 (Cannot allocate memory)\n"),
                 "Out of host memory: the job could not allocate 64.0 GiB.", "larger instance",
                 id="torch's CPU allocator's size in bytes is said in GiB"),
    pytest.param(Ending("failed", 1, log_tail="step 880\n  exitcode  : -9 (pid: 1234)\n  error_file: <N/A>\n"
                                              "  traceback : Signal 9 (SIGKILL) received by PID 1234\n"),
                 "A training process was killed by SIGKILL after step 880 (the last in the job's log): often the kernel's out-of-memory killer, but "
                 "nothing in the log confirms it.", "from the script itself",
                 id="a worker torchrun saw SIGKILLed is not said to be the kernel's either"),
])
def test_logs_the_walk_did_not_run_are_told_the_same_way(ending, sentence, hint_has):
    d = diagnose(ending)
    assert d.sentence == sentence and hint_has in d.hint, d
