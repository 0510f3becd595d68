"""``broker``: the command line. A thin layer over :class:`broker.client.BrokerClient`.

Human output (rich tables) by default, ``--json`` for scripts; errors are one
line on stderr and a non-zero exit code (with ``--json``, also one object on stdout).
Heavy imports happen inside commands, so ``broker --help`` is instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import re
import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Any

STATE_STYLE = {"succeeded": "green", "failed": "red", "cancelled": "yellow", "running": "cyan",
               "queued": "white", "stopped_budget": "magenta", "cancelling": "yellow"}


class _Usage(Exception):
    """A usage error argparse found (an option it does not know, a missing argument), raised rather than exited
    on, so that :func:`_main` says it as every other error is said."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser, self.message = parser, message


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # no prefix matching: `--stat` was read as --state without a word (and would change meaning the day an option
        # beginning so is added); an option misspelt or cut short is refused, naming the one meant (:func:`_meant`)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        raise _Usage(self, message)

    def _print_message(self, message, file=None):  # argparse's drops a write's OSError: `--help | true` exited 0
        if message:
            (file or sys.stderr).write(message)


class _Version(argparse.Action):
    """``broker --version``: the installed package's version, read only when asked (``broker --help`` stays
    instant)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        said = _cli_version() or "(not installed: run from a checkout)"
        print(f"broker {said}")
        parser.exit(0)


def _cli_version() -> str | None:
    """This CLI's installed version; ``None`` run from a checkout that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spot-broker")
    except PackageNotFoundError:
        return None


UNKNOWN_QUERY_PARAMETER = "is not a query parameter of"
"""The broker's words for a query parameter it does not take (``broker.api.query.unknown_query_refusal``): from a
CLI that sent it, most often a broker older than the CLI."""


def _older_broker_hint(exc) -> str:
    """What a 422 for a query parameter the broker does not know adds: the CLI sent it, so the broker is most likely
    older than the CLI (a laptop upgraded first, a rolling upgrade), which the bare refusal did not say."""
    if exc.status != 422 or UNKNOWN_QUERY_PARAMETER not in exc.detail:
        return ""
    version = _cli_version()
    this_cli = f"this CLI (spot-broker {version})" if version else "this CLI"
    return (f". The broker may be older than {this_cli}, which sent that parameter: upgrade the broker, or leave out "
            "the option that sent it")


class _Once(argparse.Action):
    """An option that takes one value, refused when given twice on one side of the command: argparse kept the last
    (`--team a --team b` submitted for b, `--budget 1 --budget 2` with $2), where the API and a task's YAML refuse a
    repeat. The client options given before the command and again after it still override (documented): each side
    is parsed into a namespace of its own."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = vars(namespace).setdefault("_given_once", set())  # this side's: a subcommand parses into a new one
        if self.dest in given:
            before = getattr(namespace, self.dest)
            said = "" if self.dest == "token" else f" ({before}, then {values})"  # a token is a secret: not echoed
            raise argparse.ArgumentError(self, f"given twice{said}: give it once")
        given.add(self.dest)
        setattr(namespace, self.dest, values)


class _OneWay(argparse.BooleanOptionalAction):
    """A flag and its negation (``--upload-workdir``, ``--no-upload-workdir``), refused when both are given: argparse
    kept the last, so a command line with both (one in an alias or a script, the other typed) did as the last said
    without a word, where an option given twice is refused (:class:`_Once`). The same one again means what once
    does."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = vars(namespace).setdefault("_given_way", {})  # this side's: a subcommand parses into a new one
        before = given.setdefault(self.dest, option_string)
        if before != option_string:
            raise argparse.ArgumentError(None, f"{before} and {option_string} are both given, and they say the "
                                               "opposite: give one")
        super().__call__(parser, namespace, values, option_string)


TIER_WORDS = {"ondemand": "on-demand", "onprem": "on-prem"}
"""A tier as a sentence says it (the API's values are one word)."""

KEEP_ALIVE_SECONDS = 75
"""How long ``broker serve`` keeps an idle HTTP connection open: longer than the load balancer in front of it keeps
its own (AWS's ALB 60 s by default; ``terraform/``), or the broker closes a connection the balancer is about to reuse
and that request gets a 502. uvicorn's default is 5 s."""


def _meant(message: str, argv: list[str], parser: argparse.ArgumentParser) -> tuple[str, argparse.ArgumentParser]:
    """For options argparse did not recognize, the command's own option each was likely meant to be
    (``--budegt`` → " (did you mean --budget?)", else ""), and the parser whose usage to show: the
    command's, not the top level's, which is where argparse finds leftover options."""
    import difflib

    commands = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
    command = next((commands[x] for x in argv if x in commands), None)
    choice = re.match(r"argument [^:]+: invalid choice: '(.*)' \(choose from (.*)\)$", message, re.S)
    if choice:  # `broker stauts`, `broker fault premept`: the command or the kind meant, as for an option
        choices = re.findall(r"'([^']*)'", choice.group(2))
        misplaced = _command_option_first(choice.group(1), argv, parser, commands)
        if misplaced:
            return misplaced, parser
        close = difflib.get_close_matches(choice.group(1), choices, n=1, cutoff=0.6)
        return (f" (did you mean {close[0]}?)" if close else ""), parser
    if not message.startswith("unrecognized arguments:"):
        return "", parser
    known = [o for q in (parser, command) if q is not None for o in q._option_string_actions if o.startswith("--")]
    command = command or parser
    meant = {given.split("=")[0]: close[0] for given in argv if given.startswith("--")
             and given.split("=")[0] not in known
             for close in [difflib.get_close_matches(given.split("=")[0], known, n=1, cutoff=0.6)] if close}
    if len(meant) == 1:
        return f" (did you mean {next(iter(meant.values()))}?)", command
    said = ", ".join(f"{close} for {given}" for given, close in meant.items())
    return (f" (did you mean {said}?)" if said else ""), command


def _command_option_first(value: str, argv: list[str], parser: argparse.ArgumentParser, commands: dict) -> str:
    """For ``broker --team x status``: a command's own option given before the command, whose value argparse read
    as the command ("invalid choice: 'x' (choose from 'serve', …)"), as words saying where it goes; "" otherwise."""
    i = argv.index(value) if value in argv else -1
    option = argv[i - 1] if i > 0 else ""
    if not option.startswith("-") or option in parser._option_string_actions:
        return ""
    command = next((x for x in argv[i + 1:] if x in commands), None)
    if command is None or option not in commands[command]._option_string_actions:
        return ""
    return (f" ({option} is an option of `broker {command}`: give it after the command, as "
            f"`broker {command} {option} {value}`)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="broker", description="spot-broker: run ML training where it is cheapest, "
                                "within budget and deadline, and resume it after preemption.", epilog=EXIT_CODES)
    # The client options are taken before the command or after it (`broker status --json`); given
    # after it, they override: SUPPRESS keeps a subcommand from resetting what was given before.
    p.add_argument("--version", action=_Version, help="print the version of spot-broker installed, and exit")
    common = _Parser(add_help=False)
    for parser, unset in ((p, None), (common, argparse.SUPPRESS)):
        parser.add_argument("--url", default=unset, type=_given, action=_Once,
                            help="broker URL (default $BROKER_URL or http://127.0.0.1:${BROKER_PORT:-8000})")
        parser.add_argument("--token", default=unset, type=_given, action=_Once,
                            help="bearer token (default $BROKER_TOKEN or the local admin token); given here it is "
                                 "visible to other users of the host in `ps`: prefer $BROKER_TOKEN")
        parser.add_argument("--json", action="store_true", default=unset or False, help="machine-readable output")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def client(name: str, **kw) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kw)

    s = sub.add_parser("serve", help="run the broker (API + engine)")
    s.add_argument("--host", default="127.0.0.1", type=_given, action=_Once, help="address to listen on (default 127.0.0.1)")
    # BROKER_PORT is read by `broker serve` itself, not here: read here, a BROKER_PORT of "abc" was a traceback from
    # every command, `broker --help` too
    s.add_argument("--port", type=_port, default=None, action=_Once,
                   help="port (default $BROKER_PORT or 8000; 0: any free port, the one taken is printed)")
    s.add_argument("--config", default=None, type=_given, action=_Once,
                   help="config YAML (default $BROKER_CONFIG, else <data dir>/config.yaml)")
    s.add_argument("--no-engine", action="store_true", help="serve the API only; run `broker worker` apart")

    w = sub.add_parser("worker", help="run the engine without the API")
    w.add_argument("--config", default=None, type=_given, action=_Once,
                   help="config YAML (default $BROKER_CONFIG, else <data dir>/config.yaml)")
    w.add_argument("--burst", action="store_true", help="run until no job is active, then exit")

    s = client("submit", help="submit a SkyPilot task YAML")
    s.add_argument("file")
    s.add_argument("--name", type=_job_name, action=_Once,
                   help="the job's name, over the task's `name:` (as `sky jobs launch -n`): one per run of a sweep")
    s.add_argument("--budget", type=_given, action=_Once, help="budget cap in dollars (overrides broker.budget_usd)")
    s.add_argument("--team", type=_given, action=_Once, help="submit for this team (admins; default: your token's team)")
    s.add_argument("--deadline", type=_deadline, action=_Once, help="duration from now (6h, 45min, 1d12h, 2 days) or a time with its timezone (2026-12-01T18:00Z, ...+01:00, '2026-12-01 18:00 Europe/Berlin'); a time without one ('2026-12-01 18:00') is read on this machine's clock (TZ, else the system's zone)")
    s.add_argument("--expected-hours", type=_given, action=_Once, metavar="H",
                   help="how long the job runs, in hours (overrides broker.expected_hours): the quote is then a total, "
                        "and the spot policy plans for the deadline with it")
    s.add_argument("--idempotency-key", type=_idempotency_key, action=_Once,
                   help="a retry with the same key returns the first job instead of a second one")
    s.add_argument("--env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="set one of the task's envs, as `sky launch --env` (no value: this shell's)")
    s.add_argument("--secret", action="append", default=[], metavar="NAME[=VALUE]",
                   help="set one of the task's secrets, as `sky launch --secret` (no value: this shell's)")
    s.add_argument("--upload-workdir", action=_OneWay, default=None,
                   help="pack the task's workdir (honouring .skyignore or .gitignore, as SkyPilot) and its "
                        "file_mounts sources that are paths here, and upload them to the broker, so every attempt "
                        "runs with those files (default: when the broker URL is not on this host; "
                        "--no-upload-workdir: the broker reads the paths itself)")
    s.add_argument("--wait", action="store_true", help="follow the job until it ends")
    s.add_argument("--dry-run", action="store_true",
                   help="store nothing and upload nothing: print where the job would go, its quote per tier, the "
                        "estimate, whether the budget covers it and where it would stand in the queue (exit 0), or "
                        "the error the submit would give (a check of a task file for CI)")

    s = client("status", help="list jobs, or show one")
    s.add_argument("id", nargs="?", type=_job_id, help="one job: its attempts, where they ran, cost")
    s.add_argument("--state", type=_given, action=_Once,
                   help="only jobs in this state, or these with commas (queued,running; failed, stopped_budget, ...)")
    s.add_argument("--team", type=_given, action=_Once, help="admins: only this team's jobs")
    s.add_argument("--name", type=_given, action=_Once, help="only jobs whose name begins so (sweep3: sweep3-lr0.1, ...)")

    s = client("queue", help="the jobs waiting, in the order they start, with roughly when")
    s.add_argument("--team", type=_given, action=_Once, help="admins: only this team's jobs")
    s.add_argument("--name", type=_given, action=_Once, help="only jobs whose name begins so (sweep3: sweep3-lr0.1, ...)")

    s = client("logs", help="show a job's output")
    s.add_argument("id", type=_job_id)
    s.add_argument("-f", "--follow", action="store_true", help="keep following the output until the job ends (with "
                   "--json: JSON Lines, one {\"attempt\", \"data\", \"offset\"} object per piece of output)")
    s.add_argument("--attempt", type=_attempt_number, action=_Once,
                   help="this attempt's output (default: the newest); with -f, from this attempt on")

    s = client("cancel", help="cancel jobs: by id, by the start of their name, or all of a team's not ended")
    s.add_argument("ids", nargs="*", metavar="ID", type=_job_id, help="the jobs to cancel")
    s.add_argument("--name", type=_given, action=_Once,
                   help="every job not ended whose name begins so (as `sky jobs cancel -n`, `scancel --name`)")
    s.add_argument("--all", action="store_true",
                   help="every job not ended of your team (an admin's: of --team, which an admin must give)")
    s.add_argument("--team", type=_given, action=_Once, help="with --name or --all: only this team's jobs (admins)")
    s.add_argument("-y", "--yes", action="store_true",
                   help="with --name or --all: cancel without asking first (off a terminal, as in a script, it must "
                        "be given)")

    s = client("events", help="a job's state changes")
    s.add_argument("id", type=_job_id)

    s = client("resume", help="resume a failed or budget-stopped job from its last checkpoint")
    s.add_argument("id", type=_job_id)
    s.add_argument("--force", action="store_true", help="resume even after a failure of the job's own (a bug, out of memory), not the infrastructure's")
    s.add_argument("--env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="set one of the task's envs from this attempt on (no value: this shell's); a job given one "
                        "resumes without --force")
    s.add_argument("--secret", action="append", default=[], metavar="NAME[=VALUE]",
                   help="set one of the task's secrets from this attempt on, as submit's --secret (no value: this "
                        "shell's): a job that failed for a token it lacked goes on from its checkpoint")

    s = client("budget", help="set a job's budget cap (a budget-stopped job: raise it, then `broker resume`)")
    s.add_argument("id", type=_job_id)
    s.add_argument("amount", help="dollars, e.g. 40 or 12.50")

    s = client("deadline", help="set, move or remove a job's deadline (a job not ended)")
    s.add_argument("id", type=_job_id)
    s.add_argument("when", nargs="?", type=_deadline, default=None,
                   help="duration from now (6h, 45min, 1d12h) or a time with its timezone (2026-12-01T18:00Z, "
                        "'2026-12-01 18:00 Europe/Berlin'); a time without one is read on this machine's clock, as "
                        "submit --deadline reads it")
    s.add_argument("--none", action="store_true", help="remove the deadline")

    s = client("ondemand", help="run a job on on-demand from its next attempt on (resumes a stopped one)")
    s.add_argument("id", type=_job_id)
    pin = s.add_mutually_exclusive_group()
    pin.add_argument("--force", action="store_true",
                     help="resume it on on-demand even though it failed for a reason of its own")
    pin.add_argument("--off", action="store_true",
                     help="take the pin back: its next attempts go where it is cheapest again")

    s = client("fault", help="admins, simulated zones only: preempt or kill a job's attempt, or take a "
                                     "zone's capacity away")
    s.add_argument("kind", choices=["preempt", "kill", "zone"])
    s.add_argument("target", help="a job id (preempt, kill) or a zone name (zone)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--down", dest="available", action="store_false", default=None, help="zone: no capacity")
    g.add_argument("--up", dest="available", action="store_true", help="zone: capacity held up whatever its trace says (neither flag: back to its trace)")

    s = client("costs", help="spend, saving against on-demand and preemptions, for a team and a window, or one job")
    s.add_argument("id", nargs="?", type=_job_id, help="a job: its attempts and what each cost")
    s.add_argument("--team", type=_given, action=_Once, help="admins: one team (default: all); others see their own team (not with a job id)")
    s.add_argument("--period", type=_given, action=_Once, help="24h, 7d (default), 30d or 90d, ending now (or 1d, 1w, 168h, 720h, 2160h, "
                                    "the same spelled otherwise; a team's window: not with a job id, "
                                    "whose costs are its whole life)")
    s.add_argument("--since", type=_given, action=_Once, help="ISO date (that day in UTC) or time with its timezone, as a deadline "
                                   "(2026-11-30T10:00Z, ...+01:00, '2026-11-30 10:00 Europe/Berlin'), instead of --period")
    s.add_argument("--until", type=_given, action=_Once,
                   help="ISO date or time with its timezone, as --since (default now); the window ends before it, so a "
                        "date leaves that day out: --since 2026-12-01 --until 2026-12-08 is 1 to 7 December")

    sub.add_parser("simulate", help="replay spot traces with a policy (see `broker simulate --help`)",
                   add_help=False)
    return p


EXIT_CODES = """exit codes: 0 done (submit --wait, logs -f: the job succeeded); 1 refused, or the broker could not be
reached; 2 a usage error; 3 the job followed (submit --wait, logs -f) ended failed, cancelled or stopped at its
budget; 130 interrupted (Ctrl-C: a job followed is left as it is); 141 the reader of the output went away
(`broker status | head -1`), as a shell says of a tool SIGPIPE ends"""

JOB_NOT_SUCCEEDED = 3
"""The exit code of ``submit --wait`` and ``logs -f`` when the job they followed ended other than succeeded: 1 said
it as it said a broker out of reach or a refused submit, so a script could not tell a failed run from one never
started."""


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            code = _main(argv)
        except SystemExit as exc:  # --help, --version: printed; their flush below, as a command's
            if exc.code not in (0, None):
                raise
            code = 0
        # written out here, not at the interpreter's exit: a reader gone by then (`broker status | head -1` on a short
        # table) was a BrokenPipeError's traceback and exit 120, where a longer output's was 141 without a word
        if sys.stdout is not None:
            sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (`broker simulate ... | head`): stop quietly, as Unix tools do.
        _drop_output()
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    except OSError as exc:  # the output could not be written (`> /dev/full`): one line, not a traceback
        if not _output_failed(exc):
            raise
        _drop_output()
        print(f"error: {_cannot_write(exc)}", file=sys.stderr)
        return 1


def _drop_output() -> None:
    """Point stdout at /dev/null once it cannot be written (its reader gone, its disk full), so that what is left in
    its buffer is dropped at the interpreter's final flush rather than raising there again ("Exception ignored")."""
    if sys.stdout is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


_WRITE_ERRNOS = {"ENOSPC", "EDQUOT", "EFBIG", "EIO", "EBADF"}
"""The errors of a write to an output that cannot take it: a full disk or quota, a file too large, a device gone."""


def _output_failed(exc: OSError) -> bool:
    """Whether ``exc`` is a write to stdout failing, not a file the command reads (which names its file)."""
    import errno

    return exc.filename is None and errno.errorcode.get(exc.errno or 0) in _WRITE_ERRNOS


def _cannot_write(exc: OSError) -> str:
    return (f"cannot write the output (stdout): {exc.strerror or exc}; send it where it can be written (a file on a "
            "disk with room, or a pipe)")


def _stored_said(args) -> str:
    """For an error after a submit was stored: which job it made, so that a script does not submit it again."""
    job_id = getattr(args, "submitted", None)
    if not job_id:
        return ""
    return (f"; the job was submitted all the same, as {job_id}: `broker status {job_id}` shows it (do not submit "
            "it again)")


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    simulate_argv = _simulate_argv(argv)
    if simulate_argv is not None:
        from pricing.simulate_cli import main as simulate, parser as simulate_parser

        unknown = _unknown_simulate_options(simulate_argv, simulate_parser())
        if unknown:
            return unknown
        return simulate(simulate_argv)
    parser = _parser()
    argv = _dash_values(argv, parser)
    try:
        args = parser.parse_args(argv)
        _check_combinations(parser, args)
    except _Usage as exc:  # argparse's own line, with the option a typo meant; with --json also one object
        hint, shown = _meant(exc.message, argv, exc.parser)
        message = exc.message + hint
        shown.print_usage(sys.stderr)
        print(f"{shown.prog}: error: {message}", file=sys.stderr)
        if "--json" in argv:
            _print_json({"error": message, **({"field": f} if (f := _option_blamed(message)) else {})})
        return 2
    if args.command is None:
        if args.json:  # a script reads one object, as for every other usage error, and the usage is said on stderr
            parser.print_usage(sys.stderr)
            message = "give a command (broker --json status, ...): `broker --help` lists them"
            print(f"broker: error: {message}", file=sys.stderr)
            _print_json({"error": message})
        else:
            _parser().print_help()
        return 2
    if sys.stdout is None and args.command not in ("serve", "worker"):
        # stdout closed (`>&-`): nothing written could be read, and a submit made a job then a traceback; refused
        # before anything is done instead
        print(f"error: the output (stdout) is closed, so nothing `broker {args.command}` says could be read: nothing "
              "was done; send it to /dev/null to drop it (> /dev/null)", file=sys.stderr)
        return 1
    try:
        code = COMMANDS[args.command](args)
        if sys.stdout is not None:
            sys.stdout.flush()  # here, so that a failing write is said with what was done (a submit's job id)
        return code
    except KeyboardInterrupt:
        _say_left(args)
        return 130
    except BrokenPipeError:
        if getattr(args, "submitted", None):  # the reader went before it read the id: a script could submit twice
            print(f"note: the reader of the output went away; the job was submitted all the same, as "
                  f"{args.submitted}: `broker status {args.submitted}` shows it", file=sys.stderr, flush=True)
        raise
    except Exception as exc:  # one clear line, never a traceback
        from broker.client import BrokerError

        if isinstance(exc, OSError) and _output_failed(exc):
            # said on stderr alone: the --json error object would go to the same output that just failed
            _drop_output()
            print(f"error: {_cannot_write(exc)}{_stored_said(args)}", file=sys.stderr)
            return 1

        if isinstance(exc, BrokerError):
            where = f" [{exc.status}]" if exc.status else ""
            detail = exc.detail + _base_url_hint(args, exc) + _older_broker_hint(exc)
            print(f"error{where}: {detail}", file=sys.stderr)
            _json_error(args, detail, exc.status, exc.field or (None if exc.status else _option_blamed(exc.detail)))
            return 1
        from broker.config import ConfigError

        if isinstance(exc, (ConfigError, ValueError, OSError)):
            said = exc.located() if isinstance(exc, ConfigError) else str(exc)  # which file, when a file's setting
            print(f"error: {said}", file=sys.stderr)
            _json_error(args, said, field=_option_blamed(str(exc)))
            return 1
        raise


def _unknown_simulate_options(argv: list[str], parser: argparse.ArgumentParser) -> int:
    """``broker simulate --windos x``: the option not known, named with the one meant, as the other commands name
    one (exit 2; 0 when every option is known, or when ``--windows`` is given and simulate's parser names it).
    Argparse said first "the following arguments are required: --windows", as if the one typed were not there."""
    import difflib

    known = [o for o in parser._option_string_actions if o.startswith("--")]
    given = []
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("--") and arg.split("=")[0] not in known:
            given.append(arg.split("=")[0])
    if not given or any(a == "--windows" or a.startswith("--windows=") for a in argv):
        return 0  # simulate's own parser names it then ("unrecognized arguments: --budegt 5")
    meant = {g: close[0] for g in given for close in [difflib.get_close_matches(g, known, n=1, cutoff=0.6)] if close}
    hint = (f" (did you mean {next(iter(meant.values()))}?)" if len(given) == 1 and meant else
            f" (did you mean {', '.join(f'{c} for {g}' for g, c in meant.items())}?)" if meant else "")
    message = f"unrecognized arguments: {' '.join(given)}{hint}"
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    if "--json" in argv:
        _print_json({"error": message})
    return 2


def _say_left(args) -> None:
    """After Ctrl-C while following a job (``logs -f``, ``submit --wait``): one line on stderr saying the job was left
    as it is, where it stands when the broker says so at once, and how to follow it again. The CLI exited 130 without
    a word, and a user could not tell whether the interrupt had cancelled the job."""
    job_id = getattr(args, "following", None)
    if not job_id:
        return
    state = None
    try:
        from broker.client import BrokerClient

        with BrokerClient(args.url, args.token, timeout=2.0) as client:
            state = client.job(job_id).get("state")
    except (Exception, KeyboardInterrupt):  # a broker out of reach, or a second Ctrl-C: the line without it
        pass
    from broker.client import FINAL

    where = f"it is still {state}" if state and state not in FINAL else f"it ended {state}" if state else \
        "it was left as it is"
    then = f"`broker status {job_id}` shows it" if state in FINAL else \
        f"`broker logs -f {job_id}` follows it again, `broker cancel {job_id}` stops it"
    print(f"stopped following {job_id}; {where}: {then}", file=sys.stderr, flush=True)


def _simulate_argv(argv: list[str]) -> list[str] | None:
    """``broker [--json] [--url U] [--token T] simulate ARGS``: the arguments ``broker simulate`` takes, or ``None``
    for another command. The top-level options may come before the command as before any other: ``--json`` is
    passed on (``broker --json simulate ...`` was refused with "unrecognized arguments", every simulate option
    named), and ``--url`` and ``--token`` are dropped, as ``broker serve`` ignores them: simulate replays traces
    here and asks no broker."""
    json_given, i = False, 0
    while i < len(argv) and argv[i] != "simulate":
        option = argv[i]
        if option == "--json":
            json_given = True
        elif option in ("--url", "--token"):
            i += 1  # its value
        elif not option.startswith(("--url=", "--token=")):
            return None  # another command, or an option of none
        i += 1
    if i >= len(argv):
        return None
    rest = argv[i + 1:]
    return [*rest, "--json"] if json_given and "--json" not in rest else rest


def _dash_values(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with a value that begins with '-' joined to its option (``--deadline -1h`` → ``--deadline=-1h``),
    so that its type says what is wrong with it, or takes it (a token may begin with '-'): argparse read it as an
    option and said only "expected one argument". Only after an option that takes one value (:class:`_Once`), and
    only a value that is no option of the CLI's and does not begin with '--' (``--team --budget 5``: the value was
    left out, as argparse says)."""
    parsers = [parser, *next(a.choices for a in parser._actions
                             if isinstance(a, argparse._SubParsersAction)).values()]
    options = {o for q in parsers for o in q._option_string_actions}
    valued = {o for q in parsers for a in q._actions if isinstance(a, _Once) for o in a.option_strings}
    out, i = [], 0
    while i < len(argv):
        if argv[i] == "--":
            return out + argv[i:]
        if argv[i] in valued and i + 1 < len(argv) and argv[i + 1].startswith("-") \
                and not argv[i + 1].startswith("--") and argv[i + 1] not in options:
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _check_combinations(parser: argparse.ArgumentParser, args) -> None:
    """Options that each parse but do not go together, refused as a usage error rather than silently ignored."""
    commands = next(a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if args.command == "deadline" and args.none == (args.when is not None):
        raise _Usage(commands["deadline"], "give the new deadline (6h, '2026-12-08 09:00 Europe/Berlin') or --none "
                                           "to remove it, not both" if args.none else
                     "give the new deadline (6h, '2026-12-08 09:00 Europe/Berlin'), or --none to remove it")
    if args.command == "submit" and args.dry_run and args.wait:
        raise _Usage(commands["submit"], "--wait: a dry run makes no job to follow; leave out --wait or --dry-run")
    if args.command == "fault" and args.kind != "zone" and args.available is not None:
        flag = "--up" if args.available else "--down"  # ignored: `fault kill J --down` killed it and said nothing of it
        raise _Usage(commands["fault"], f"{flag}: only a zone's fault takes it (`broker fault zone ZONE {flag}`); "
                                        f"leave it out of `broker fault {args.kind}`")
    if args.command == "cancel":
        ways = [way for way, given in (("ID", args.ids), ("--name", args.name), ("--all", args.all)) if given]
        if not ways:
            raise _Usage(commands["cancel"], "give the jobs to cancel: their ids, --name PREFIX or --all")
        if len(ways) > 1:
            raise _Usage(commands["cancel"], f"{' and '.join(ways)} each pick the jobs to cancel: give one")
        if args.ids and args.team:  # it read as "only those of team T", which a cancel by id is not
            raise _Usage(commands["cancel"], "--team: is for --name or --all; jobs given by id are cancelled "
                                             "whichever team's they are")
        if (args.name or args.all) and not args.yes and (args.json or not sys.stdin.isatty()):
            # as `sky jobs cancel --all` asks first: a prefix too short or --all on a team's token (every job of the
            # team, whoever submitted it) cancels more than meant, and a cancelled job does not resume with a click
            raise _Usage(commands["cancel"], f"{ways[0]} cancels every job it matches: add --yes to cancel them "
                                             "without being asked (a script), or run it on a terminal to see them "
                                             "and be asked first")
    if args.command == "status" and args.id:
        given = [f"--{k}" for k in ("state", "name", "team") if getattr(args, k, None)]
        if given:  # `broker status J --state queued` showed J whatever its state, the filters dropped without a word
            raise _Usage(commands["status"], f"{', '.join(given)}: filter the list of jobs; a job given by its id is "
                                             f"shown whatever {'they say' if len(given) > 1 else 'it says'}: leave "
                                             f"{'them' if len(given) > 1 else 'it'} out, or the id")
    if args.command == "costs" and args.id:
        given = [f"--{k}" for k in ("period", "since", "until", "team") if getattr(args, k)]
        if given:  # `broker costs JOB --period 7d` showed the job's whole life as if it were the last 7 days
            raise _Usage(commands["costs"], f"{', '.join(given)}: a job's costs are its whole life, attempt by attempt; "
                                            f"leave {'them' if len(given) > 1 else 'it'} out with a job id (a window "
                                            "is for a team's costs: `broker costs --period 7d`)")


_ONE_OPTION = re.compile(r"^(?:argument )?(--[a-z][\w-]*)(?:/-\w)?(?: [^\s:,]+)?: ")


def _option_blamed(message: str) -> str | None:
    """The one option a refusal of the CLI's own begins by naming (``--period: ...``, ``argument --attempt:
    ...``, ``--env FOO: ...``), for a ``--json`` error's ``field``; ``None`` for several or none."""
    m = _ONE_OPTION.match(message)
    return m.group(1) if m else None


def _base_url_hint(args, exc) -> str:
    """What to add to a broker's 404 for a route it does not have when the URL given has a path: ``--url
    http://127.0.0.1:8000/v1`` asked for ``/v1/v1/jobs`` and said only "error [404]: Not Found", as if the broker
    were broken. A 404 naming a job (its detail is not Starlette's bare "Not Found") gets nothing added."""
    from urllib.parse import urlsplit

    from broker.client import BrokerError, default_url

    if exc.status != 404 or exc.detail != "Not Found":
        return ""
    try:
        url = (args.url if getattr(args, "url", None) is not None else default_url()).strip().rstrip("/")
        parts = urlsplit(url)
    except (BrokerError, ValueError):
        return ""
    if not parts.path:
        return ""
    source = "--url" if getattr(args, "url", None) is not None else "BROKER_URL"
    return (f" (the broker has no such route under {url}: {source} is the broker's base URL, without a path, "
            f"like {parts.scheme}://{parts.netloc})")


def _json_error(args, sentence: str, status: int = 0, field: str | None = None) -> None:
    """With ``--json``, an error is also one JSON object on stdout: a script piping the output into ``jq`` got
    nothing to read when a refusal went to stderr alone. ``status`` and ``field`` when the broker gave them."""
    if not getattr(args, "json", False):
        return
    body: dict[str, Any] = {"error": sentence}
    if status:
        body["status"] = status
    if field:
        body["field"] = field
    # in a JSON Lines stream (`logs -f --json`) one line, as each object before it: indented, a reader of lines
    # broke on it
    _print_json(body, one_line=getattr(args, "command", None) == "logs" and getattr(args, "follow", False))


# -- commands -------------------------------------------------------------------------------------


def cmd_serve(args) -> int:
    import uvicorn

    from broker.api.app import create_app
    from broker.config import load_settings, redacted_url

    from broker.client import env_port

    port = args.port if args.port is not None else env_port()  # a BROKER_PORT that is no port: one line, naming it
    # the port it serves on, whatever BROKER_PORT holds: it is pasted into the URL jobs report to
    try:
        settings = load_settings({**os.environ, "BROKER_PORT": str(port)}, config_path=args.config,
                                 create_admin_token=True)
    except FileExistsError as exc:  # the data dir made where a file is: it said only "[Errno 17] File exists: …"
        if not exc.filename or os.path.basename(exc.filename) == "admin-token" or os.path.isdir(exc.filename):
            raise  # the admin token made by another broker starting at the same moment: said as it is
        print(f"error: the data directory {exc.filename} is a file, not a directory: set BROKER_DATA_DIR (or the "
              "config file's data_dir) to a directory", file=sys.stderr)
        return 1
    _check_prices(settings)
    key_warning = _check_secrets_key(settings)
    # Listen first: uvicorn starts the app (its engine, ticking on the store) before it binds, so a second
    # `broker serve` on a taken port would run its engine — with its own config — until the bind failed.
    listener = _listen(args.host, port)
    port = listener.getsockname()[1]  # the port taken: with --port 0 the system's choice, not 0
    if not os.environ.get("BROKER_PUBLIC_URL") and "public_url" not in settings.extra:
        # jobs on this host report progress to the port we actually listen on
        host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        settings = dataclasses.replace(settings, public_url=f"http://{_host_port(host, port)}")
    _broker_logs()  # before the app opens its launcher, whose start-up warnings are then said as the broker's lines
    from broker.store import StoreError

    try:
        app = create_app(settings, engine=False if args.no_engine else None)
    except StoreError as exc:  # a store file damaged, read-only or not to be opened: one line naming it, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # What exists now (modules, the app, settings) lives as long as the process: freeze it so the
    # collector's full passes under load scan only what requests leave behind. Unfrozen, each full
    # pass walked ~80k startup objects and stalled every request for 30-70 ms on the shared VM.
    gc.collect()
    gc.freeze()
    print(f"spot-broker on http://{_host_port(args.host, port)}  store={redacted_url(settings.store_url)}  "
          f"launcher={settings.launcher}  engine={'off' if args.no_engine or not settings.engine else 'on'}  "
          f"{_config_words(settings)}", file=sys.stderr)
    if key_warning:
        print(key_warning, file=sys.stderr)
    for warning in (short_tokens_warning(os.environ), open_data_dir_warning(settings.data_dir)):
        if warning:
            print(warning, file=sys.stderr)
    token_file = _admin_token_file(settings)
    if token_file:
        print(f"admin token in {token_file} ({_cli_reads_it(settings.data_dir)}; paste it into /dashboard, "
              "or send it as Authorization: Bearer)", file=sys.stderr)
    config = uvicorn.Config(app, log_level="warning", timeout_keep_alive=KEEP_ALIVE_SECONDS)
    from broker.peers import register, unregister

    # where the jobs launched on this data dir report when their own broker does not answer (broker/peers.py)
    peer = register(settings.data_dir, settings.public_url)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        unregister(peer)
    return 0


def short_tokens_warning(env) -> str | None:
    """A warning naming the tokens in ``BROKER_ADMIN_TOKEN`` and ``BROKER_TEAM_TOKENS`` shorter than
    :data:`broker.config.SHORT_TOKEN` characters (the broker took a one-character team token without a word; anyone
    who can reach its port may guess it), with how to make a good one; ``None`` when there are none. Warned, not
    refused: a broker upgraded in place keeps the tokens its teams hold. The config file's are warned of as it is
    read (``Settings.warnings``)."""
    from broker.config import SHORT_TOKEN, _json_env  # as load_settings read them (it refused a malformed one)

    short = []
    admin = env.get("BROKER_ADMIN_TOKEN") or ""
    if admin and len(admin) < SHORT_TOKEN:
        short.append("BROKER_ADMIN_TOKEN")
    short += [f"team {team}'s" for team, token in sorted(_json_env(env, "BROKER_TEAM_TOKENS").items())
              if isinstance(token, str) and len(token) < SHORT_TOKEN]
    if not short:
        return None
    return (f"warning: {', '.join(short)} token{'s are' if len(short) > 1 else ' is'} shorter than {SHORT_TOKEN} "
            f"characters, which anyone who reaches this port may guess: give {'each' if len(short) > 1 else 'it'} 32 random characters "
            "(`openssl rand -hex 16`)")


def open_data_dir_warning(data_dir) -> str | None:
    """A warning when the broker's data directory lets other users of the host in (group or other bits set): the
    broker makes it 0700 — its store, admin token, secrets key, jobs' output and checkpoints are in it — but a
    directory that existed before keeps its mode. ``None`` when it is the owner's alone, or missing."""
    try:
        mode = data_dir.stat().st_mode & 0o777
    except OSError:
        return None
    if not mode & 0o077:
        return None
    return (f"warning: the data directory {data_dir} is mode {mode:04o}: other users of this host may read its jobs' "
            f"output and checkpoints, and its store; `chmod 700 {data_dir}` keeps them the broker's user's")


def _broker_logs() -> None:
    """The broker's own INFO lines on stderr (what a prune or a workdir collection deleted, an attempt stopped as
    soon as launched): as ``broker worker`` shows them. Only the ``broker`` loggers: other libraries' INFO (an HTTP
    client's line per request) stays out, and uvicorn keeps its own warning level."""
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(_log_format())
    # the price table's own lines (pricing.loading: a catalog passed over) are the broker's too. Said by this handler
    # alone: passed on to the root logger as well, they were said twice wherever it has a handler — importing SkyPilot
    # gives it one (sky/catalog/data_fetchers/fetch_vsphere.py calls logging.basicConfig()), so each catalog warning
    # came once with its time and once as "WARNING:broker.offers:..."
    for name in ("broker", "pricing"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def _log_format():
    """The broker's log lines, ``serve``'s and ``worker``'s alike: a UTC time first, as the events' times are written
    (``2026-12-05T22:27:29Z WARNING broker.engine: ...``), so a line can be matched to a job's events; without it a
    log read outside journald or a container's runtime had no time at all."""
    import logging
    import time as _time

    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = _time.gmtime
    return formatter


def _host_port(host: str, port: int) -> str:
    """``host:port`` as a URL writes it: an IPv6 address in brackets (``[::1]:8000``). Without them the start
    line showed ``http://::1:8000``, and jobs were told to report their progress to that URL, which no client
    can parse."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _listen(host: str, port: int):
    """A socket listening on ``host:port``, or an ``OSError`` saying the port is taken and what to do."""
    import errno
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not left 0: asyncio's loop turns Nagle off (TCP_NODELAY) only on sockets whose proto reads
    # IPPROTO_TCP, and accepted connections inherit the listener's. Left 0, a broker without uvloop (a plain
    # `pip install spot-broker`) answered every request ~40 ms late: a response's last small write waited for the
    # client's delayed ACK. uvloop sets TCP_NODELAY whatever the proto says, which is why installs with it were fast.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart need not wait out TIME_WAIT
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise OSError(f"{_host_port(host, port)} is already in use (another `broker serve`?): stop it, or serve on "
                          "another port with --port or BROKER_PORT") from None
        raise OSError(f"cannot listen on {_host_port(host, port)}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _cli_reads_it(data_dir: Path) -> str:
    """How the CLI on this host finds the admin token file in ``data_dir``: by itself when it is the data dir the
    CLI looks in (``BROKER_DATA_DIR``, else the default), else with ``BROKER_DATA_DIR`` set to it. A data dir given by
    the config file's ``data_dir:`` was said to be read by the CLI, which knows nothing of the server's config file
    and looked in the default one: every command was a 401."""
    from broker.config import default_data_dir

    if os.path.realpath(default_data_dir(os.environ)) == os.path.realpath(data_dir.expanduser()):
        return "the CLI on this host reads it"
    return (f"the data dir is the config file's data_dir: for the CLI on this host to read it, set "
            f"BROKER_DATA_DIR={shlex.quote(str(data_dir))}")


def _admin_token_file(settings) -> Path | None:
    """The data dir's generated admin token file when it is what admins sign in with (no BROKER_ADMIN_TOKEN
    or admin_token_sha256 set): a first-day user needs it for the dashboard and curl, and is told where."""
    from broker.config import hash_token

    path = settings.data_dir / "admin-token"
    try:
        return path if hash_token(path.read_text().strip()) in settings.admin_token_hashes else None
    except OSError:
        return None


def _where(p: dict) -> str:
    """``spot n1-highmem-8+V100:1 in gcp/us-central1-a`` from a placement record: the cloud named, as in
    Slack (zones of two clouds may look alike), not for a pool (``onprem local-1slot in local``)."""
    where = " ".join(str(x) for x in (p.get("tier"), p.get("instance_type")) if x)
    nodes = p.get("num_nodes")
    if isinstance(nodes, int) and nodes > 1:  # its price is all of them: "g5.xlarge, $0.8492/h" read as one's, doubled
        where = f"{p.get('tier')} {nodes} nodes of {p.get('instance_type')}"
    loc = p.get("zone") or p.get("region")
    if loc:
        cloud = p.get("cloud")
        where += f" in {cloud}/{loc}" if cloud and p.get("tier") != "onprem" and cloud != loc else f" in {loc}"
    return where + (" (simulated)" if p.get("simulated") else "")


def _check_prices(settings) -> None:
    """Read the price table and price every pool and zone now, so that a malformed catalog or a zone
    with no price stops the broker at start with one line naming it (a ``ValueError``), rather than
    failing every submit with a 500 and every engine tick in the log."""
    from broker.offers import all_offers

    all_offers(settings)


def _check_secrets_key(settings) -> str | None:
    """Read (or make, once) the key that seals the tasks' secrets, so that a malformed key file stops the
    broker at start with one line naming it. Brokers on several hosts share a Redis store but not a data
    directory: without ``BROKER_SECRETS_KEY`` each would seal with a key of its own, and fail to launch
    the others' jobs with secrets, so the warning returned is printed at start."""
    from broker.sealing import KEY_FILE, sealer_for

    sealer_for(settings, create=True)
    if settings.secrets_key is None and not settings.store_url.startswith("sqlite://"):
        return (f"warning: BROKER_SECRETS_KEY is not set: task secrets are sealed with this host's key file "
                f"({settings.data_dir / KEY_FILE}); a broker on another host sharing this store cannot launch "
                "jobs with secrets, nor take the progress reports of jobs this one launched, until every broker is "
                "given the one key (docs/deploy.md)")
    return None


def cmd_worker(args) -> int:
    import logging
    import signal
    import threading

    from broker.config import load_settings
    from broker.retention import Retention
    from broker.runtime import key_warnings, open_launcher
    from broker.store import StoreError, open_store

    from broker.config import redacted_url

    logging.basicConfig(level=logging.INFO)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(_log_format())
    settings = load_settings(config_path=args.config)
    _check_prices(settings)
    key_warning = _check_secrets_key(settings)
    # what this engine places jobs with, said: a worker started without the API's config placed them on the default
    # pool `local`, billed at its price, beside the API's quotes on the pools it knew, and its log said nothing
    print(f"spot-broker worker  store={redacted_url(settings.store_url)}  launcher={settings.launcher}  "
          f"{_config_words(settings)}  pools: {', '.join(p.name for p in settings.pools) or 'none'}; zones: "
          f"{', '.join(z.name for z in settings.zones) or 'none'}", file=sys.stderr)
    if key_warning:
        print(key_warning, file=sys.stderr)
    try:
        store = open_store(settings.store_url)
    except StoreError as exc:  # a store file damaged, read-only or not to be opened: one line naming it, no traceback
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for warning in key_warnings(settings, store):  # as `broker serve` says them: queued jobs' keys, a stale key file
        logging.getLogger("broker").warning("%s", warning)
    engine, notifier = worker_engine(settings, store, open_launcher(settings))
    if not os.environ.get("BROKER_PUBLIC_URL") and "public_url" not in settings.extra:
        # it serves no API: its jobs report to the brokers serving it on this data dir (broker/peers.py), not to
        # BROKER_PORT's default, 8000, which a worker beside `broker serve --port 18060 --no-engine` handed them
        from broker.peers import serving

        engine.own_url = None
        found = serving(settings.data_dir)
        print(f"jobs report their progress to the broker serving the API on {settings.data_dir} "
              f"({found[0] if found else 'none now: until one starts, to ' + settings.public_url}); "
              "set BROKER_PUBLIC_URL where the API is elsewhere", file=sys.stderr)
    retention = Retention.of(settings, engine.store)  # prunes finished jobs beside the ticks (job_retention_days)
    try:
        if args.burst:
            # it prunes as it starts, as every engine does (README): a burst run from cron was the one engine whose
            # store kept its finished jobs for ever
            retention.tick_safely()
            engine.run_until_idle(timeout=24 * 3600)
            return 0
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        retention.start()
        while not stop.is_set():
            engine.tick_safely()  # a store that stops answering for a while must not end the worker
            stop.wait(settings.tick_seconds)
        return 0
    finally:
        retention.stop()
        if notifier is not None:
            notifier.close()


def _config_words(settings) -> str:
    """The start line's word on the config file: the one read, or that none was (the built-in defaults: a process of
    a deployment started without its BROKER_CONFIG runs with other pools and prices than the rest)."""
    if settings.config_file is not None:
        return f"config={settings.config_file}"
    return "config=none (the defaults; BROKER_CONFIG or --config names a file)"


def worker_engine(settings, store, launcher):
    """``broker worker``'s engine and the Slack notifier its events go to (``None`` when none is configured):
    with the engine out of the API processes, the engine's events reach Slack only from here."""
    from broker.api.slack import notifier_for
    from broker.engine.reconcile import Engine

    notifier = notifier_for(store, settings)
    return Engine(settings, store, launcher, on_event=notifier.handle if notifier else None), notifier


def _client(args):
    from broker.client import BrokerClient

    return BrokerClient(args.url, args.token)


def _console():
    """A console for human output. Piped or redirected (``broker status | grep running``), it is as wide as
    the output needs, as ``kubectl get`` is: a table is never cut to fit 80 columns nobody will see, and each
    row stays on one line for ``grep``. On a terminal, its width."""
    from rich.console import Console

    class Out(Console):
        def on_broken_pipe(self) -> None:
            # rich's own exits with SystemExit(1), read by :func:`main` as a refusal: `broker status J | true`
            # exited 1 where a plain print's 141 says the reader went away, and a submit piped so said nothing
            self.quiet = True
            raise BrokenPipeError(32, "the reader of the output went away")

    if sys.stdout.isatty():
        # NO_COLOR (no-color.org): no escape codes at all; rich's own reading of it dropped the colours alone, and a
        # terminal that shows no escapes still got the bold and dim ones
        return Out(color_system=None) if os.environ.get("NO_COLOR") else Out()
    con = Out(width=100_000)
    con.plain_tables = True  # :func:`_print_table`: columns, no borders
    return con


def _print_table(con, columns: list, rows: list[list[str]], *, drop: tuple[str, ...] = (),
                 same: tuple[str, ...] = (), one_line: bool = False) -> None:
    """Print a table whose ``(name, "whole")`` columns (ids, states, times, amounts) are never cut or wrapped:
    ``broker status`` at 80 columns showed a state as "que…", a budget of $100.00 as "$10…". When they do not
    fit the console, the columns that say nothing go first: those named in ``drop`` whose every cell is blank, and
    those named in ``same`` whose every cell holds one value (the line under the table says it: "every team
    default"). Then the columns named in ``drop`` are left out, in that order (and a line says which); the
    other columns wrap (``one_line``: are cut with "…" instead, a row to a line). Still too narrow, the table is
    printed wider than the terminal rather than cut. (At 80
    columns, 8 failed jobs took 98 lines: a blank queue, a blank starts ~ and a team column of "default" kept,
    the reason 13 wide.)"""
    from rich.table import Column, Table
    from rich.text import Text

    # a cell is its text, never markup: a reason quoting a log's "[rank1]: ValueError" lost its "[rank1]", and one
    # holding "[/x]" stopped the CLI with a MarkupError; a cell styled on purpose comes as a rich Text
    rows = [[c if isinstance(c, Text) else Text(str(c)) for c in row] for row in rows]
    names = [c if isinstance(c, str) else c[0] for c in columns]
    if getattr(con, "plain_tables", False):
        _print_plain(names, [[" ".join(c.plain.split()) for c in row] for row in rows])
        return
    whole = {c[0] for c in columns if not isinstance(c, str)}

    def width(i: int, least: bool) -> int:
        texts = [names[i], *(row[i].plain for row in rows)]
        longest = max(len(t) for t in texts)
        return longest if names[i] in whole or not least else min(longest, 10)

    def needed(keep: list[int]) -> int:  # each column: its text, a space each side, one rule; and the last edge
        return sum(width(i, least=True) + 3 for i in keep) + 1

    keep, left_out, said = list(range(len(names))), [], []
    if sum(width(i, least=False) + 3 for i in keep) + 1 > con.width:  # something wraps: first what says nothing
        for i, name in enumerate(names):
            cells = {row[i].plain.strip() for row in rows}
            if name in drop and cells <= {""}:
                keep.remove(i)
            elif name in same and len(cells) == 1 and "" not in cells:
                keep.remove(i)
                said.append(f"every {name} {cells.pop()}")
    for name in drop:
        if needed(keep) <= con.width:
            break
        if name in names and names.index(name) in keep:
            keep.remove(names.index(name))
            left_out.append(name)
    cut_at = _one_line_widths(con.width, [names[i] for i in keep], [width(i, least=False) for i in keep], whole) \
        if one_line else {}
    table = Table(*(Column(names[i], no_wrap=True, min_width=width(i, least=True)) if names[i] in whole
                    else Column(names[i], no_wrap=True, overflow="ellipsis", width=cut_at[names[i]])
                    if one_line else Column(names[i], overflow="fold", min_width=width(i, least=True)) for i in keep))
    if needed(keep) > con.width:
        # rich draws a table no wider than the console whatever print's width says, and squeezed the columns that
        # wrap to nothing (`broker events` at 40 columns: a reason zero wide); its own width is what it keeps to
        table.width = needed(keep)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    con.print(table, width=max(con.width, needed(keep)), crop=False)
    if left_out or said:
        # "to fit 50 columns" under a table 61 wide said what had not happened
        fit = f"to fit {con.width} columns" if needed(keep) <= con.width else \
            f"{needed(keep)} columns wide, its ids, states, times and amounts whole, on {con.width}"
        parts = [*said, *([f"{fit}, without: {', '.join(left_out)}"] if left_out else [])]
        con.print(Text(f"({'; '.join(parts)}; piped or --json: all)", style="dim"))


def _one_line_widths(room: int, names: list[str], longest: list[int], whole: set[str]) -> dict[str, int]:
    """The widths of the columns a one-line table cuts (those not whole): each at most :data:`CUT_COLUMN` wide but the
    last, which takes the room left (at least 10). Left to rich, a cut column took the width of its longest cell and
    the table was then squeezed to the console, drawing the short columns (``#``, a name) zero wide."""
    taken = sum(n + 3 for name, n in zip(names, longest) if name in whole) + 1
    cut = [i for i, name in enumerate(names) if name not in whole]
    widths = {names[i]: min(longest[i], CUT_COLUMN) for i in cut[:-1]}
    if cut:
        left = room - taken - sum(w + 3 for w in widths.values()) - 3
        widths[names[cut[-1]]] = max(10, min(longest[cut[-1]], left))
    return widths


CUT_COLUMN = 24
"""The widest a one-line table's cut column is drawn (a name), the last one (a reason) aside."""


def _pinned_by(job: dict) -> str:
    """Who pinned the job's tier, for its status line: the broker moved it off spot to meet the deadline (which read as
    "pinned to on-prem" as if the user had asked for it), or a user by name; nothing from a broker that does not say."""
    by = job.get("pinned_by")
    if by == "deadline":
        return f" (by the broker, to meet the deadline; `broker ondemand {job['id']} --off` lets it use spot again)"
    return f" (by {by})" if by else ""


def _print_plain(names: list[str], rows: list[list[str]]) -> None:
    """A table piped or redirected, as ``kubectl get`` prints one: a header line, then one line per row, the columns
    at their full width three spaces apart, no borders and no trailing spaces; so ``awk '{print $1}'`` reads the
    ids. Drawn with its terminal borders (``┃ j-… │``), ``$1`` was a border and ``cut`` read box characters."""
    widths = [max(len(x) for x in [name, *(row[i] for row in rows)]) for i, name in enumerate(names)]
    for line in [names, *rows]:
        print("   ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


def _print_json(data: Any, *, one_line: bool = False) -> None:
    print(json.dumps(data) if one_line else json.dumps(data, indent=2))


def _budget_lasts(job: dict) -> str:
    """For a job priced per hour (no ``expected_hours``), how long its budget runs it on each tier it may run on (at
    the tier's cheapest match, cheapest tier first) before its budget stop, when one of them is under a day, and each
    tier the budget cannot start it on at all: a $0.002 budget was admitted at "$0.20/h" and stopped at it within
    seconds, the user learning only then what it paid for. Until the budget stop, not the budget over the price: the
    engine stops a job once what is left pays only for a clean stop, and a SkyPilot cluster's billing after its run
    is kept of the budget too (:func:`broker.admission.budget_lasts`, which a dry run's ``budget_lasts_seconds`` reads
    as well)."""
    from broker.admission import budget_lasts
    from broker.views import duration

    quote = job.get("quote") or {}
    budget = (job.get("budget") or {}).get("micros")
    # each tier it may run on, cheapest first: named for the cheapest alone, a job the full pool sent to spot was
    # stopped in a third of the time said
    lasts = budget_lasts(quote, budget) if isinstance(budget, int) else None
    if not lasts:
        return ""
    runs = {tier: seconds for tier, seconds in lasts.items() if seconds is not None}
    cannot = [TIER_WORDS.get(tier, tier) for tier, seconds in lasts.items() if seconds is None]
    if not cannot and min(runs.values()) >= 86_400:
        return ""
    after = any(t.get("after_run") for t in quote.get("tiers") or [] if isinstance(t, dict) and t.get("tier") in runs)
    kept = "a clean stop and the billing after its run" if after else "a clean stop"
    said = [f"{duration(seconds)} on {TIER_WORDS.get(tier, tier)}" for tier, seconds in runs.items()]
    listed = f"{', '.join(said[:-1])} or {said[-1]}" if len(said) > 1 else "".join(said)  # (none: said[0] raised)
    ran = f"runs it for about {listed} until its budget stop, {kept} kept out of it" if said else ""
    # after "runs it for …; it", a second "it": "it cannot start it on on-demand at all"
    none = f"cannot start {'' if ran else 'it '}on {' or '.join(cannot)} at all" if cannot else ""
    return (f" — the budget {ran}{'; it ' if ran and none else ''}{none} (give broker.expected_hours for an estimate "
            "of the whole run)")


def _placed_said(reason: str, price: str) -> str:
    """A dry run's placement sentence with its price (``, at $11.26/h``) after the offer placed on, before the clause
    naming a cheaper offer of a later ``ordered`` alternative passed over: added at the end, it read as that offer's
    ("spot 8x A100 … is cheaper but comes later in `ordered`, at $11.26/h", the H100's price)."""
    from pricing.placement import LATER_IN_ORDERED

    head, sep, passed = reason.rpartition("; ")
    if sep and passed.endswith(LATER_IN_ORDERED):
        return f"{head}{price}; {passed}"
    return f"{reason}{price}"


def _tiers_covered(covers: dict) -> str:
    """``the budget covers spot, not on-prem or on-demand``; ``the budget covers no tier: not spot or on-demand``:
    a dry run's ``budget_covers`` in words. Said as two lists joined by commas it read "covers no tier, not spot,
    on-demand", and "covers spot, not on-prem, on-demand" as if on-demand were covered."""
    from pricing.placement import _series as series  # "a, b and c", as placement's sentences list offers

    said = [TIER_WORDS.get(t, t) for t, ok in covers.items() if ok]
    short = [TIER_WORDS.get(t, t) for t, ok in covers.items() if not ok]
    if not said:
        return f"the budget covers no tier: not {series(short, 'or')}"
    return f"the budget covers {series(said, 'and')}" + (f", not {series(short, 'or')}" if short else "")


def cmd_submit(args) -> int:
    from broker.client import fill_task_env_refs, load_task, read_task_file, resolve_local_paths

    text = read_task_file(args.file)
    task = load_task(text)
    for key, given in (("envs", args.env), ("secrets", args.secret)):
        if given:
            task[key] = {**(task.get(key) or {}), **_assignments(given, "--" + key.rstrip("s"))}
    if args.name is not None:
        if task.get("name") not in (None, args.name) and not args.json:
            print(f"note: --name {args.name} overrides the task's name {task['name']!r}", file=sys.stderr)
        task["name"] = args.name
    fill_task_env_refs(task)
    resolve_local_paths(task)
    _not_negative(args.deadline)
    args.deadline = _on_this_clock(args.deadline, quiet=args.json)
    with _client(args) as client, _options_named(args):
        if args.dry_run:
            return _submit_dry_run(task, client, args)
        _ship_workdir(task, client, args.upload_workdir, quiet=args.json)
        _say_overridden(task, args)
        # the key made here rather than in the client, so that a Ctrl-C while the broker is slow to answer can name it
        key = args.idempotency_key or uuid.uuid4().hex
        try:
            job = client.submit(task, budget=args.budget, team=args.team, deadline=args.deadline, idempotency_key=key,
                                expected_hours=args.expected_hours, prepared=True)
        except KeyboardInterrupt:
            # as the timeout says it: the request may have reached the broker, and exit 130 alone left a script
            # unable to tell whether to submit again
            print(f"interrupted: the submit may have been stored; retrying with --idempotency-key {key} "
                  "(Idempotency-Key header) cannot submit it twice", file=sys.stderr, flush=True)
            raise
        args.submitted = job["id"]  # what an output that fails from here on names (:func:`_stored_said`)
        if args.wait:
            args.following = job["id"]  # what a Ctrl-C leaves running (:func:`_say_left`)
        # the job a retry with this key answered with, as the dry run names it: a replayed submit's JSON was the job
        # alone, which a script could not tell from a new one (the human line says "already submitted")
        existing = {"existing_job": job["id"] if client.last_submit_created is False else None}
        if args.json and not args.wait:
            _print_json({**job, **existing})
            return 0
        if args.json:  # --wait --json: the output on stderr, and on stdout only the ended job's JSON, for a script
            for text in client.follow_logs(job["id"], on_status=_say_status, on_attempt_end=_say_attempt_end,
                                                on_unreachable=_say_unreachable):
                sys.stderr.write(text)
                sys.stderr.flush()
            final = client.job(job["id"])
            _print_json({**final, **existing})
            return 0 if final["state"] == "succeeded" else JOB_NOT_SUCCEEDED
        con = _console()
        if client.last_submit_created is False and args.idempotency_key:
            con.print(f"already submitted with this idempotency key: [bold]{job['id']}[/] ({job['name']}), "
                      f"{job['state']}; nothing new was submitted")
        else:
            quote = "; ".join(f"{t['tier']} {t['text']}" for t in job["quote"].get("tiers", []))
            con.print(f"submitted [bold]{job['id']}[/] ({job['name']}) for team {job['team']}{_envs_said(args.env)}: "
                      f"budget {job['budget']['usd']}{_deadline_said(job)}, estimate {quote}{_budget_lasts(job)}")
            hint = _credential_envs_hint(args.env or [])
            if hint:
                print(hint, file=sys.stderr)
            if not args.wait:  # --wait says where it stands as it changes
                _say_behind(con, client, job["id"])
        if args.wait:
            ended_line = True
            for text in client.follow_logs(job["id"], on_status=_say_status, on_attempt_end=_say_attempt_end,
                                                on_unreachable=_say_unreachable):
                sys.stdout.write(text)
                sys.stdout.flush()
                ended_line = text.endswith("\n")
            final = client.job(job["id"])
            if not ended_line:  # output whose last line has no line end: the summary was glued onto it
                con.print()
            _show_job(con, final)
            return 0 if final["state"] == "succeeded" else JOB_NOT_SUCCEEDED
    return 0


def _envs_said(given: list[str]) -> str:
    """`` with LR=0.02 SEED=0`` for a submit's ``--env`` options, so that the runs of a sweep (one task, its envs
    told apart) can be told apart in their submit lines. A value written on the command line is said as given (it
    is in the shell's history already), unless its name looks like a credential's (:func:`_credential_name`: it
    would be on the screen, in a CI log, in a pasted transcript): that one is named alone, as one taken from this
    shell (``--env HF_TOKEN``) is, never echoed. ``--secret`` is never said."""
    from rich.markup import escape

    said = []
    for item in given:
        name, eq, value = item.partition("=")
        said.append(f"{name} (value not shown)" if eq and _credential_name(name, value) else
                    item if eq else f"{item} (this shell's)")
    return f" with {escape(' '.join(said))}" if said else ""


_CREDENTIAL_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PAT", "CREDENTIALS", "PRIVATE")
"""Parts of an env's name (between underscores) that make it a credential's: ``HF_TOKEN``, ``GITHUB_PAT``; a count of
them (``MAX_TOKENS``, ``NUM_TOKENS``) is not one."""
_CREDENTIAL_VALUE = re.compile(r"^(?:hf_|ghp_|gho_|ghs_|github_pat_|glpat-|xox[abpr]-|sk-|AKIA|ASIA)[A-Za-z0-9_-]{8,}|"
                               r"^[a-z][a-z0-9+.-]*://[^/@:\s]*:[^/@\s]+@")
"""A value that is a credential whatever its name: a token of a service that prefixes them (Hugging Face, GitHub,
GitLab, Slack, OpenAI-style ``sk-``, an AWS access key id), or a URL with a password in it
(``postgres://user:pw@host/db``)."""


def _credential_name(name: str, value: str | None = None) -> bool:
    """Whether an env looks like a credential: by its name (HF_TOKEN, WANDB_API_KEY, DB_PASSWORD,
    AWS_SECRET_ACCESS_KEY, SSH_KEY, GITHUB_PAT; case aside; not MAX_TOKENS, a count) or by its ``value``
    (:data:`_CREDENTIAL_VALUE`: ``ghp_…`` under any name, a URL with a password): its value is not echoed, and the
    submit hints at ``--secret``."""
    parts = name.upper().split("_")
    return any(word in parts for word in _CREDENTIAL_WORDS) or parts[-1] == "KEY" or "APIKEY" in parts or \
        (value is not None and _CREDENTIAL_VALUE.search(value) is not None)


def _credential_envs_hint(given: list[str]) -> str | None:
    """The one line a submit adds when an ``--env`` looks like a credential: an env is stored and shown as it is,
    where ``--secret`` seals it and hides it in the logs."""
    names = list(dict.fromkeys(name for name, eq, value in (item.partition("=") for item in given)
                               if _credential_name(name, value if eq else None)))
    if not names:
        return None
    flags = " ".join(f"--secret {name}=VALUE" for name in names)
    them = "it" if len(names) == 1 else "them"
    looks = "looks like a credential" if len(names) == 1 else "look like credentials"
    return (f"note: {', '.join(names)} {looks}: {flags} seals {them} and hides {them} in the logs (an --env is kept "
            "as given)")


def _deadline_said(view: dict) -> str:
    """``, deadline 2026-12-07 08:00Z (in 16.0 h)`` for a job (or a dry run) with a deadline: the moment the broker
    read, in UTC and from now, so that a misread unit or time zone shows at submit rather than when the job is late.
    The deadline went unsaid at submit and in the dry run."""
    given = view.get("deadline")
    return f", deadline {_deadline_moment(given)}" if given else ""


def _deadline_moment(given: str, job: dict | None = None) -> str:
    """``2026-12-07 08:00Z (in 16.0 h)``, or ``(2.5 h ago)`` once passed: a deadline as submit says it, and as
    ``broker status ID`` says it (it printed the stored ISO text, ``2026-12-07T08:00:00Z``, with nothing from now).
    From 48 h away on, in days (``in 111 days``: a deadline months away read "in 2667.4 h"), either side of now.
    Of a ``job`` (its view) that has ended, whether it met it (``met, 2 min before it``, ``missed by 5 min``:
    :func:`broker.views.deadline_met_words`, at its ``updated_at``, which the engine keeps as its end): it counted
    down "(in 51 s)" to the deadline of a job that had succeeded."""
    from datetime import datetime

    from broker.views import deadline_met_words
    from broker.views import far_duration as duration

    try:
        when = datetime.fromisoformat(given.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return given
    try:
        ended = datetime.fromisoformat(job["updated_at"].replace("Z", "+00:00")).timestamp() \
            if job and isinstance(job.get("updated_at"), str) else None
    except ValueError:
        ended = None
    if ended is not None and (said := deadline_met_words(str(job.get("state")), when, ended)):
        return f"{time.strftime('%Y-%m-%d %H:%MZ', time.gmtime(when))} ({said})"
    left = when - time.time()
    return (f"{time.strftime('%Y-%m-%d %H:%MZ', time.gmtime(when))} "
            # to the nearest, either side: `--deadline 2h` read "(in 1.9 h)" just after, and 10m "(in 9 min)"
            + (f"(in {duration(left, nearest=True)})" if left >= 0 else f"({duration(-left, nearest=True)} ago)"))


_ZONELESS_TIME = re.compile(r"\s*\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\s*")
"""A deadline that is a date and a time with no offset and no time zone's name: ``2026-12-07 09:00``, or with an
hour of one digit (``2026-12-07 9:00``, read as ``09:00``: :func:`broker.spec.two_digit_hour`)."""


def _on_this_clock(given: str | None, *, quiet: bool, flag: str = "--deadline") -> str | None:
    """``--deadline`` given as a time with no time zone (``2026-12-07 09:00``), read on this machine's clock and sent
    with that moment's offset (``2026-12-07T09:00+01:00``, summer time included), as ``date``, ``at`` and Slurm's
    ``--deadline`` read a time. The broker refuses a time without its zone: it cannot know the submitter's clock
    (:func:`broker.spec.parse_deadline`). The CLI can, and a user at a terminal means their own: ``TZ`` (an IANA
    name, or a POSIX rule such as ``CET-1CEST,M3.5.0,M10.5.0/3``), else the system's zone. A note on stderr says how it
    was read, and the submit line says the moment in UTC and from now, so a machine on another clock than its user
    (a server on UTC) shows at once. A task file's ``broker.deadline`` is not read so: a file is shared and submitted
    from machines on other clocks, and one without its zone stays refused. Anything else is sent as given, for the
    broker to read or refuse."""
    _date_or_time_alone(given, flag=flag)
    if given is None or not _ZONELESS_TIME.fullmatch(given):
        return given
    from datetime import datetime
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from broker.client import BrokerError
    from broker.spec import two_digit_hour

    try:
        moment = datetime.fromisoformat(two_digit_hour(given.strip()))
    except ValueError:  # 2026-02-30 09:00: the broker's refusal says what is wrong with it
        return given
    name = os.environ.get("TZ", "").removeprefix(":")
    named = bool(name) and not any(c.isdigit() for c in name)  # an IANA name (a POSIX rule has its offset's digits)
    if named:
        try:
            if name.startswith("/"):  # TZ=/usr/share/zoneinfo/Asia/Tokyo, as `date` reads it
                with open(name, "rb") as fh:
                    zone = ZoneInfo.from_file(fh, key=name)
            else:
                zone = ZoneInfo(name)
            local = moment.replace(tzinfo=zone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise BrokerError(0, f"{flag} {given.strip()} gives no time zone, so it is read on this machine's "
                                 f"clock, but TZ={name} names no time zone this machine knows: set TZ to an IANA name "
                                 "such as Europe/Berlin, or give the deadline's zone "
                                 "('2026-12-01 18:00 Europe/Berlin', 2026-12-01T18:00Z)", field=flag) from None
    else:
        try:
            local = moment.astimezone()  # the C library's reading of TZ or the system's zone, for that day
        except (OverflowError, ValueError, OSError):  # 0001-01-01 00:00 west of UTC is in year 0
            return given  # the broker refuses it, far out of a deadline's range as it is
    try:
        sent = local.isoformat(timespec="minutes" if not (moment.second or moment.microsecond) else "auto")
    except (OverflowError, ValueError):
        return given
    if not quiet:
        # the clock as TZ names it: a POSIX rule's tzname is its letters alone ("UTC" of TZ=UTC-3, 3 h east of it)
        clock = name if named else (f"TZ={os.environ['TZ']}" if os.environ.get("TZ") else local.tzname())
        print(f"note: {flag} {given.strip()} gives no time zone: read on this machine's clock "
              f"({clock}), as {sent}{_summer_time(moment, local) if named else ''}", file=sys.stderr)
    return sent


_TIME_ALONE = re.compile(r"\s*(\d{1,2}):(\d{2})(?::(\d{2}))?\s*")
"""A deadline that is a time of day with no date: ``9:00``, ``18:30``."""
_DATE_ALONE = re.compile(r"\s*\d{4}-\d{2}-\d{2}\s*")
"""A deadline that is a date with no time of day: ``2026-12-07``."""


def _date_or_time_alone(given: str | None, *, flag: str = "--deadline") -> None:
    """Refuse ``--deadline 9:00`` (a time with no date) and ``--deadline 2026-12-07`` (a date with no time), saying
    what is missing and forms the CLI takes, on this machine's clock first (:func:`_on_this_clock`). The broker's
    refusals were "must be an ISO time or a duration" for the one, and for the other a time *and* its timezone,
    which the CLI does not need. The time's example is its next coming on this clock (today's, else tomorrow's)."""
    from datetime import datetime, timedelta

    from broker.client import BrokerError

    if given is None:
        return
    shown = given.strip()
    if (alone := _TIME_ALONE.fullmatch(given)) is not None:
        hour, minute, second = (int(g) if g else 0 for g in alone.groups())
        if hour > 23 or minute > 59 or second > 59:
            return  # not a time of day: the broker's refusal says what it takes
        now = datetime.now().astimezone()
        at = now.replace(hour=hour, minute=minute, second=second, microsecond=0)
        day = (at if at > now else at + timedelta(days=1)).date().isoformat()
        clock = f"{hour:02d}:{minute:02d}" + (f":{second:02d}" if second else "")
        raise BrokerError(0, f"{flag} '{shown}': a time needs its date: '{day} {clock}' (read on this machine's "
                             f"clock), '{day}T{clock}Z' (UTC), or a duration such as '6h'", field=flag)
    if _DATE_ALONE.fullmatch(given):
        raise BrokerError(0, f"{flag} '{shown}': a date needs its time of day: '{shown} 18:00' (read on this "
                             f"machine's clock), '{shown}T18:00Z' (UTC), or a duration such as '6h'",
                          field=flag)


def _summer_time(moment, local) -> str:
    """What the note adds when ``moment`` (a wall-clock time) is not one moment on its zone's clock: skipped (the hour
    summer time begins) or read twice (the hour it ends). ``zoneinfo`` picks an offset without a word."""
    from datetime import timezone

    zone = local.tzinfo
    if local.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None) != moment:
        return " — that time does not exist on this clock (summer time skips it): give the offset if another is meant"
    if moment.replace(tzinfo=zone, fold=1).utcoffset() != local.utcoffset():
        return (" — that time comes twice on this clock (summer time ends): the first is taken; give the offset if "
                "the second is meant")
    return ""


def _say_overridden(task: dict, args) -> None:
    """A note on stderr for each of submit's options that overrides another value the task file's ``broker:`` gives
    (``--budget 5`` over ``budget_usd: '2'``), as Slack's reply says it: the option wins, as its help says, but the
    file's value went unsaid. None where both say the same (``--budget 2`` and ``budget_usd: 2.00``)."""
    from broker.spec import same_setting

    section = task.get("broker") if isinstance(task.get("broker"), dict) else {}
    now = time.time()
    for option, key in (("budget", "budget_usd"), ("team", "team"), ("deadline", "deadline"),
                        ("expected_hours", "expected_hours")):
        given, theirs = getattr(args, option, None), section.get(key)
        if given is None or theirs is None or same_setting(key, given, theirs, now=now):
            continue
        shown = f"'{theirs}'" if isinstance(theirs, str) else _file_number(key, theirs)
        print(f"note: --{option.replace('_', '-')} {given} overrides the task's broker.{key} {shown}", file=sys.stderr)


def _file_number(key: str, value: Any) -> str:
    """A task file's unquoted value as the note shows it: YAML gave the number, not its text, so an amount of dollars
    is shown as money (``budget_usd: 1.00`` is ``$1.00``: "1.0" was not what the file says), anything else as read."""
    if key == "budget_usd" and isinstance(value, (int, float)) and not isinstance(value, bool):
        from pricing.money import MoneyError, fmt_limit, typed_to_micros

        try:
            return fmt_limit(typed_to_micros(value))
        except MoneyError:
            pass
    return str(value)


_OPTION_FIELDS = {"budget": "broker.budget_usd", "team": "broker.team", "deadline": "broker.deadline", "name": "name",
                  "expected_hours": "broker.expected_hours"}
"""The task field each of submit's options sets (:func:`broker.client._submit_task`)."""


class _options_named:
    """Around a submit: a refusal of a field that one of its options set (``--budget abc``) names the option, not
    the field the CLI put it in (``broker.budget_usd: ...``, which the task file did not hold)."""

    def __init__(self, args):
        self.args = args

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        from broker.client import BrokerError

        if not isinstance(exc, BrokerError) or not exc.field:
            return False
        for option, field in _OPTION_FIELDS.items():
            if exc.field == field and getattr(self.args, option, None) is not None:
                flag = f"--{option.replace('_', '-')}"  # --expected-hours, as it is typed
                exc.field = flag
                if exc.detail.startswith(f"{field}: "):
                    exc.detail = f"{flag}: " + exc.detail.removeprefix(f"{field}: ")
                if "." in field:  # named in the sentence too: a monthly cap's "give broker.budget_usd at most $1.81"
                    exc.detail = exc.detail.replace(field, flag)
        if getattr(self.args, "expected_hours", None) is not None:  # a deadline refused against it names the option
            exc.detail = exc.detail.replace("broker.expected_hours", "--expected-hours")
        return False


def _price_said(placement: dict) -> str:
    """``, at $0.4246/h`` after a dry run's placement; of several nodes, each node's price (``, $0.4246/h a node``): the
    reason already gives all of them' ("2 nodes, $0.8492/h for both"), and ", at $0.8492/h" after it read as a node's."""
    from pricing.money import fmt_rate

    price, nodes = placement.get("price_per_hour"), placement.get("num_nodes")
    if not isinstance(price, int):
        return ""
    if isinstance(nodes, int) and nodes > 1:
        return f", {fmt_rate(price // nodes)}/h a node" if price % nodes == 0 else ""
    return f", at {fmt_rate(price)}/h"


def _submit_dry_run(task: dict, client, args) -> int:
    """``broker submit --dry-run``: the broker's answer to ``POST /v1/jobs?dry_run=true`` in a few lines (``--json``:
    the object as it is). The workdir and file_mounts a submit would upload are checked here as a submit checks them
    (packed and held to the broker's ``max_workdir_bytes``) and left out of what is sent, never uploaded (a dry run
    against a remote broker leaves nothing there);
    the broker checks the rest of the task as the submit's own."""
    _ship_workdir(task, client, args.upload_workdir, quiet=args.json, dry_run=True)
    run = client.submit_dry_run(task, budget=args.budget, team=args.team, deadline=args.deadline,
                                idempotency_key=args.idempotency_key, expected_hours=args.expected_hours, prepared=True)
    if args.json:
        _print_json(run)
        return 0
    con = _console()
    con.print("[dim]dry run: nothing was submitted, stored or uploaded[/]", highlight=False)
    if run.get("existing_job"):
        con.print(f"already submitted with this idempotency key: [bold]{run['existing_job']}[/] ({run['name']}); a "
                  "submit would answer with it and queue nothing new", highlight=False)
    quote = "; ".join(f"{t['tier']} {t['text']}" for t in (run.get("quote") or {}).get("tiers", []))
    con.print(f"would queue {run['name']} for team {run['team']}: budget {run['budget']['usd']}"
              f"{_deadline_said(run)}, estimate {quote}{_budget_lasts(run)}", highlight=False)
    covers = run.get("budget_covers")
    if run.get("estimate") and covers:
        con.print(f"for {run['expected_hours']} h: {run['estimate']['usd']} at the cheapest; "
                  f"{_tiers_covered(covers)}", highlight=False)
    placement = run.get("placement")
    if placement:
        con.print(f"would be {_placed_said(run['reason'], _price_said(placement))}", highlight=False)
    else:
        con.print(f"would wait: {(run.get('reason') or '').removeprefix('waiting: ')}", highlight=False)
    position = run.get("queue_position")
    if isinstance(position, int) and placement:
        # placed at the next tick, it starts now: "queue: position 1 (no job waits ahead of it)" read as waiting
        past = " (no job waits ahead of it)" if position == 1 else \
            f", past the {'1 job that waits' if position == 2 else f'{position - 1} jobs that wait'} ahead of it " \
            "for capacity it does without"
        con.print(f"queue: it would start now{past}", highlight=False)
    elif isinstance(position, int):
        ahead = "no job waits ahead of it" if position == 1 else \
            "1 job waits ahead of it" if position == 2 else f"{position - 1} jobs wait ahead of it"
        start = f"; estimated start {_short_time(run['estimated_start'])}" if run.get("estimated_start") else ""
        con.print(f"queue: position {position} ({ahead}){start}", highlight=False)
    return 0


SUBMIT_SETTLE_SECONDS = 3.0
"""How long ``broker submit`` waits at most for the engine to decide on a job submitted behind waiting jobs before it
says where the job stands (:func:`_say_behind`): the engine ticks once a second by default, and a tick on a busy host
takes longer."""


def _say_behind(con, client, job_id: str, *, since: int | None = 1) -> None:
    """After a submit (or a resume), when other jobs wait ahead of it: how many, and where to see roughly when it
    starts. The submit's answer holds no queue position (working it out on every submit would read the whole queue), so
    the job is read once more; that read failing takes nothing from the submit, which was accepted.

    The position counts the whole queue, and the scheduler starts a job past those ahead of it that wait for capacity
    it can do without (best-effort FIFO, :mod:`broker.queue`): "2 jobs wait ahead of it" was said of a job that the
    engine placed at its next tick on a free spot zone, the pool those two waited for being full. So a job with jobs
    ahead of it is read again until the engine has decided on it (written since the submit's own write, the store's
    version 1 of it: placed, or given a reason of its own), for at most :data:`SUBMIT_SETTLE_SECONDS`: placed, nothing
    more is said, as of a job first in line; still queued, how many wait ahead of it; not decided yet (an engine with
    long ticks, or none in this broker process), that it starts at the engine's next tick if capacity it can use is
    free. A job first in line that the engine left queued is said to be so, with its reason and rough start: it said
    nothing, as of a job placed, while every slot it could use was full.

    ``since``: the store's version of the job that the command's own answer holds (1 for a submit; a resumed job's
    is its version after the resume, written many times before), so that "decided" is a write after it. ``None`` (a
    broker too old to say a version): decided at once, as a job whose reads hold no version is."""
    from broker.client import BrokerError

    def behind(job: dict) -> int | None:
        """Its queue position while it is queued (1: first in line, which said nothing and read as starting)."""
        position = job.get("queue_position")
        return position if job.get("state") == "queued" and isinstance(position, int) else None

    def decided(job: dict) -> bool:
        return since is None or not isinstance(job.get("version"), int) or job["version"] > since

    try:
        job = client.job(job_id)
        until = time.monotonic() + SUBMIT_SETTLE_SECONDS
        while behind(job) and not decided(job) and time.monotonic() < until:
            time.sleep(0.2)
            job = client.job(job_id)
    except (BrokerError, OSError):
        return
    position = behind(job)
    if position is None:
        return
    if position == 1:  # first in line, yet not started: said, with why and roughly when, as of a job behind others
        from broker.views import LATE_START

        why = (job.get("reason") or "").removeprefix("waiting: ")
        # a reason that says its start too late for its deadline ("estimated to start at 07:40Z, after its deadline
        # at …") says the start: "; estimated start 07:40Z" after it said it twice
        said_start = any(part.startswith(LATE_START) for part in why.split("; "))
        start = f"; estimated start {_short_time(job['estimated_start'])}" \
            if job.get("estimated_start") and not said_start else ""
        if decided(job):
            con.print(f"queued first in line{': ' + why if why else ''}{start}", highlight=False)
        else:
            con.print("queued first in line: it starts at the engine's next tick if capacity it can use is free; "
                      "`broker queue` shows roughly when it starts", highlight=False)
        return
    ahead = "1 job waits" if position == 2 else f"{position - 1} jobs wait"
    if decided(job):
        # a start too late for its deadline, in the words `queue` and `status` say it (broker.views.deadline_words, in
        # the job's reason as shown): a job due in 2 min, fourth in line, was told only how many waited ahead of it
        from broker.views import DEADLINE_PASSED, LATE_START

        late = "".join(f"; {part}" for part in (job.get("reason") or "").split("; ")
                       if part.startswith((LATE_START, DEADLINE_PASSED)))
        con.print(f"queued: {ahead} ahead of it (position {position}){late}; `broker queue` shows roughly when it "
                  "starts", highlight=False)
    else:
        con.print(f"queued at position {position} ({ahead} ahead of it): it starts at the engine's next tick if "
                  "capacity it can use is free; `broker queue` shows roughly when it starts")


def _version_of(job: dict) -> int | None:
    """The store's version a command's answer holds of the job (``_say_behind``'s ``since``); ``None`` from a broker
    too old to say one."""
    version = job.get("version")
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _on_this_host(url: str) -> bool:
    """Whether the broker URL names this machine (:func:`broker.client.on_this_host`)."""
    from broker.client import on_this_host

    return on_this_host(url)


def _ship_workdir(task: dict, client, upload: bool | None, *, quiet: bool = False, dry_run: bool = False) -> None:
    """The task's workdir and local file_mounts packed and uploaded where the broker cannot read them
    (:meth:`broker.client.BrokerClient.ship_workdir`), each pack said on stderr unless ``quiet``, and the choice named
    by this command's flags."""
    client.ship_workdir(task, upload, dry_run=dry_run, options=("--upload-workdir", "--no-upload-workdir"),
                        on_upload=None if quiet else lambda line: print(line, file=sys.stderr))


def _assignments(given: list[str], flag: str) -> dict[str, str]:
    """``NAME=VALUE`` (or ``NAME``: its value in this shell) as ``sky launch --env`` reads them."""
    from broker.client import BrokerError

    out = {}
    for item in given:
        name, eq, value = item.partition("=")
        if name in out:  # `--env FOO=1 --env FOO=2` ran with the last, as an option given twice did
            said = "" if flag == "--secret" or _credential_name(name, value) or _credential_name(name, out[name]) else \
                f" ({out[name]}, then {value if eq else '$' + name})"  # not echoed
            raise BrokerError(0, f"{flag} {name}: given twice{said}: give it once")
        if not eq:
            if name not in os.environ:
                raise BrokerError(0, f"{flag} {name}: no value given and none in this shell; use {flag} {name}=VALUE")
            value = os.environ[name]
        out[name] = value
    return out


def _say_status(job: dict) -> None:
    """While following a job with no output yet: one line on stderr each time where it stands changes."""
    from broker.views import beside_state

    if job["state"] in ("running", "succeeded"):
        return
    where = f", position {job['queue_position']} in the queue" if job.get("queue_position") else ""
    eta = f", roughly starting at {job['estimated_start']}" if job.get("estimated_start") else ""
    reason = f": {beside_state(job['state'], job['reason'])}" if job.get("reason") else ""
    print(f"[{job['id']} {job['state']}{where}{eta}{reason}]", file=sys.stderr, flush=True)


def _say_attempt_end(job: dict, n: int) -> None:
    """While following a job's output: one line on stderr where an attempt's output ends and the next one's begins —
    how it ended (preempted, and where) and from which checkpoint the next goes on. The two logs ran on as one."""
    from broker.views import beside_state

    ended = next((a for a in job.get("attempt_list") or [] if a.get("n") == n), None)
    how = ""
    if ended is not None:
        where = _where(ended.get("placement") or {})
        how = f" {ended.get('state')}" + (f" on {where}" if where else "") \
            + (f": {beside_state(str(ended.get('state')), ended['reason'])}" if ended.get("reason") else "")
    nxt = next((a for a in job.get("attempt_list") or [] if a.get("n") == n + 1), None)
    resume = (nxt or {}).get("resume_from")
    step = re.search(r"/step-0*(\d+)-\d+/?$", resume) if isinstance(resume, str) else None
    then = f"; attempt {n + 1} follows" + (f", from its checkpoint at step {step.group(1)}" if step else
                                           f", from {resume}" if resume else "")
    print(f"[{job['id']} attempt {n}{how}{then}]", file=sys.stderr, flush=True)


def _say_unreachable(detail: str | None) -> None:
    """While following a job's output: one line on stderr when the broker goes out of reach (a restart), and one
    when it is back; the follower asks again meanwhile (``RECONNECT_SECONDS``) instead of ending."""
    from broker.client import RECONNECT_SECONDS

    if detail is None:
        print("[the broker answers again; following on]", file=sys.stderr, flush=True)
    else:
        print(f"[{detail.rstrip('.')}: asking again for up to {int(RECONNECT_SECONDS)} s; the job runs on meanwhile]",
              file=sys.stderr, flush=True)


def _short_time(iso: str | None, today: str | None = None, *, cut: bool = False) -> str:
    """"2026-11-30T19:45:12Z" → "19:45Z" today (UTC), "12-01 19:45Z" on another day; "" for none. Rounded to the
    nearest minute (cut, an estimated start of 00:34:55 read "00:34Z"); ``cut`` for a deadline, which is never shown
    later than it is, as a reason names it (:func:`broker.views.deadline_words`): rounded, a deadline of 21:20:58
    read "due 21:21Z" beside "too late for its deadline at 21:20Z"."""
    from datetime import datetime, timedelta, timezone

    if not iso or len(iso) < 16:
        return iso or ""
    try:
        when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    when = (when + timedelta(seconds=0 if cut else 30)).replace(second=0, microsecond=0)
    iso = when.strftime("%Y-%m-%dT%H:%M")
    today = today or time.strftime("%Y-%m-%d", time.gmtime())
    clock = iso[11:16] + "Z"
    return clock if iso[:10] == today else f"{iso[5:10]} {clock}"


def _show_job(con, job: dict) -> None:
    """A job in lines. What the job or its logs wrote (a reason quoting ``[rank1]: ValueError``, a URI) is printed
    as text: read as markup, ``[rank1]`` vanished from the diagnosis and a ``[/x]`` stopped the CLI."""
    from rich.markup import escape

    from broker.views import beside_state

    style = STATE_STYLE.get(job["state"], "white")
    con.print(f"[bold]{job['id']}[/] {job['name']}  team={job['team']}  state=[{style}]{job['state']}[/]")
    if job.get("reason"):
        con.print(f"  {escape(beside_state(job['state'], job['reason']))}")
    said = job.get("diagnosis") or {}
    if job["state"] == "succeeded" and said.get("class") == "succeeded" and said.get("hint"):
        # a success with something to say (it stopped short of the step count it printed): the reason says only that
        # its command exited 0
        con.print(f"  {escape(said.get('text') or said.get('sentence') or '')}", soft_wrap=True)
    if job.get("queue_position"):
        eta = f", roughly starting at {job['estimated_start']}" if job.get("estimated_start") else ""
        con.print(f"  queue position: {job['queue_position']}{eta}")
    if job.get("progress"):
        p = job["progress"]
        total = f"/{p['total_steps']}" if p.get("total_steps") else ""
        loss = (p.get("metrics") or {}).get("loss", "")
        # a loss that is not finite (a diverged run's NaN) is stored as null: said as such, where it was a traceback
        loss = f", loss {loss:.4g}" if isinstance(loss, (int, float)) and not isinstance(loss, bool) else \
            ", loss not a number (NaN or infinite)" if loss is None else ""
        con.print(f"  progress: step {p['step']}{total}{loss}")
    if job.get("last_checkpoint"):
        con.print(f"  last checkpoint: step {job['last_checkpoint']['step']} ({escape(job['last_checkpoint']['uri'])})")
    spent, budget = _spent_of(job)
    con.print(f"  spent {spent} of {budget}"
              + (f"  deadline {_deadline_moment(job['deadline'], job)}" if job.get("deadline") else "")
              + (f"  pinned to {TIER_WORDS.get(job['pinned_tier'], job['pinned_tier'])}{_pinned_by(job)}"
                 if job.get("pinned_tier") else ""))
    attempts = job.get("attempt_list") or []
    for a in attempts:  # lines, not a table: readable at 80 columns, copyable, greppable
        p = a["placement"]
        where = _where(p)
        style = STATE_STYLE.get(a["state"], "white")
        con.print(f"  attempt {a['n']}: [{style}]{a['state']}[/] on {escape(where)}, {a['price_per_hour']['usd']}/h, "
                  f"cost {a['cost']['usd']}", soft_wrap=True)
        if a.get("started_at"):
            # its cost counts to when it was billed: a run that went on after the broker ended it (another broker
            # took its job over, and stopped it later) showed 28 s beside a cost of 60 s
            billed = a.get("billed_until")
            beyond = f", billed to {billed}" if billed and a.get("ended_at") and billed > a["ended_at"] else ""
            con.print(f"    {a['started_at']} → {a.get('ended_at') or 'now'}{beyond}", soft_wrap=True)
        if a.get("reason"):
            con.print(f"    {escape(beside_state(a['state'], a['reason']))}", soft_wrap=True)
    step = _next_step(job)
    if step:
        con.print(f"  [bold]next:[/] {escape(step)}", soft_wrap=True)


def _next_step(job: dict) -> str | None:
    """For a job that ended but may go on (failed, or stopped at its budget), the one command that continues it.
    The reason said "resume it to continue" or "raise the budget and resume" and left the user to find which
    command, and that a failure of the job's own needs ``--force``; Slack shows buttons for the same step."""
    from broker.views import TASK_FIX_CLASSES, resubmit_keep_words, resume_from_words, task_fix_words

    jid = job["id"]
    # from where: a job that saved no checkpoint starts over (it said "from its last checkpoint" of none)
    point = (job.get("last_checkpoint") or {}).get("step")
    where = resume_from_words(point)
    if job["state"] == "stopped_budget":
        return (f"`broker resume {jid}` continues it {where} once its budget has room: "
                f"`broker budget {jid} <dollars>` raises it")
    if job["state"] != "failed":
        return None
    if (job.get("diagnosis") or {}).get("infrastructure"):
        return f"not the job's own error: `broker resume {jid}` continues it {where}"  # one bracket, not two
    if (job.get("diagnosis") or {}).get("class") == "credentials":  # the diagnosis names the secret
        asked = (job.get("diagnosis") or {}).get("secrets")
        names = list(dict.fromkeys(n.strip() for n in asked if isinstance(n, str) and n.strip())) \
            if isinstance(asked, list) else []  # a broker whose diagnosis names none: the placeholder
        flags = " ".join(f"--secret {shlex.quote(n)}" for n in names) or "--secret NAME"
        lacked = "the secrets it lacked" if len(names) > 1 else "the secret it lacked"
        return (f"`broker resume {jid} {flags}` gives it {lacked} (no value: this shell's) and "
                f"continues it {where}")
    keep = resubmit_keep_words(job.get("checkpoint_uri"), point)
    if (job.get("diagnosis") or {}).get("class") == "disk_full":  # a resume gets the same disk: --force alone fills it
        return (f"a full disk: once the job writes less there, `broker resume {jid} --force` continues it {where} on "
                f"a disk of the same size; for a larger one, submit again with a larger resources.disk_size{keep}")
    if (job.get("diagnosis") or {}).get("class") in TASK_FIX_CLASSES:  # "resume --force" fails the same way
        return task_fix_words(jid, where, keep)
    # "--force runs it again unchanged" was not so: a workdir on the broker's host is read anew at each attempt
    return (f"a failure of the job's own: fix what made it fail, then `broker resume {jid} --force` continues it "
            f"{where} with the code as it is then (a workdir on the broker's host is read anew at each attempt); "
            f"an uploaded workdir stays as it was: submit again{keep}")


def _spent_of(job: dict) -> tuple[str, str]:
    """A job's spend and budget to read side by side, at the same decimals (:func:`pricing.money.fmt_spent_of`):
    the view's own strings, each right alone, read "$0.0020 of $0.002" for a budget all spent. From the exact
    micro-dollars; the view's strings as they are from a broker whose view lacks them."""
    from pricing.money import fmt_spent_of

    spent, budget = job["spent"], job["budget"]
    if isinstance(spent.get("micros"), int) and isinstance(budget.get("micros"), int):
        return fmt_spent_of(spent["micros"], budget["micros"])
    return spent["usd"], budget["usd"]


def _short_failure(job: dict, reason: str) -> str | None:
    """For a failed job in a list (``broker status``, no id) whose ``reason`` is its diagnosis and more (the hint:
    what to change, how to resume; 8 to 13 lines in a table): the diagnosis's sentence, what went wrong, with
    ``broker status ID`` for the rest. ``None`` for any other job, or a reason that is not led by its diagnosis."""
    diagnosis = job.get("diagnosis")
    if job.get("state") != "failed" or not isinstance(diagnosis, dict):
        return None
    sentence = diagnosis.get("sentence")
    if not isinstance(sentence, str) or not sentence.strip():
        return None
    # the whole sentence: cut at its first full stop, it cut the user's own exception message ("Learning rate 3e-4 too
    # high." without its "Use at most 1e-4.")
    first = sentence.strip()
    said = reason.removeprefix("failed: ")
    return first if said.startswith(first) and len(said) > len(first) else None


def _reason_cell(job: dict) -> str:
    """A listed job's reason, led for a running job by the step it last reported (:func:`broker.views.step_words`:
    ``step 150/300 · the attempt started``), and without a lead that says its state again
    (:func:`broker.views.beside_state`)."""
    from broker.views import beside_state, step_words

    step = step_words(job.get("state", ""), job.get("progress"))
    reason = beside_state(job.get("state", ""), job["reason"] or "")
    reason = _short_failure(job, reason) or reason
    return reason if step is None else f"{step} · {reason}" if reason else step


def cmd_status(args) -> int:
    with _client(args) as client:
        if args.id:
            job = client.job(args.id)
            if args.json:
                _print_json(job)
            else:
                _show_job(_console(), job)
            return 0
        jobs, cut = _listed_jobs(client, state=args.state, team=args.team, name=args.name)
    if cut:  # on stderr: `broker status | grep running` and `--json | jq` read on, and the note is still seen
        print(cut, file=sys.stderr)
    if args.json:
        _print_json(jobs)  # the list as it was, for scripts; the sweep's total on stderr, as beside the table
        if args.name and len(jobs) > 1:
            print(_spent_together(jobs, args.name, listed_only=bool(cut)), file=sys.stderr)
        return 0
    if not jobs:  # an empty table's borders said nothing (`broker queue` says "Nothing is waiting.")
        if args.state or args.team or args.name:
            states = " or ".join(args.state.split(",")) if args.state else ""
            print(" ".join(x for x in ("No", states, "jobs", f"named {args.name}*" if args.name else "",
                                       f"of team {args.team}" if args.team else "") if x) + ".")
        else:
            print("No jobs yet: submit one with `broker submit task.yaml`.")
        return 0
    from rich.text import Text

    # a deadline column only where a job not ended has one: an ended job's deadline is history
    due = any(j.get("deadline") and j["state"] in LIVE_STATES for j in jobs)
    rows = [[j["id"], j["name"], j["team"], Text(j["state"], style=STATE_STYLE.get(j["state"], "white")),
             str(j["queue_position"] or ""), _short_time(j.get("estimated_start")),
             *([_short_time(j.get("deadline"), cut=True) if j["state"] in LIVE_STATES else ""] if due else []),
             *_spent_of(j), _reason_cell(j)]
            for j in jobs]
    _print_table(_console(), [("id", "whole"), "name", "team", ("state", "whole"), ("queue", "whole"),
                              ("starts ~", "whole"), *([("due", "whole")] if due else []), ("spent", "whole"),
                              ("budget", "whole"), "reason"], rows,
                 drop=("due", "starts ~", "queue", "team", "budget"), same=("team",))
    if any(_short_failure(j, j["reason"] or "") for j in jobs):  # on stderr: `| awk '{print $1}'` reads ids alone
        print("(a failed job's reason here is what went wrong, in a sentence: `broker status ID` says the rest and "
              "what to do)", file=sys.stderr)
    if args.name and len(jobs) > 1:  # a sweep's runs: what they cost together (on stderr, as the notes above)
        print(_spent_together(jobs, args.name, listed_only=bool(cut)), file=sys.stderr)
    return 0


def _spent_together(jobs: list[dict], name: str, *, listed_only: bool = False) -> str:
    """``12 jobs named sweep2*: $0.0966 spent in all, of $12.00 of budgets`` — a sweep's total, which took a jq sum.
    ``listed_only``: older ended jobs were left out of the listing (said above it), so the total is of those listed,
    and says so: it read as the sweep's whole cost with the oldest runs, those that ran, left out."""
    from pricing.money import fmt, fmt_limit

    spent = sum(j["spent"]["micros"] for j in jobs if isinstance(j["spent"].get("micros"), int))
    budgets = sum(j["budget"]["micros"] for j in jobs if isinstance(j["budget"].get("micros"), int))
    if listed_only:
        return (f"the {len(jobs)} jobs listed named {name}*: {fmt(spent)} spent together, of {fmt_limit(budgets)} "
                f"of budgets (not the older ended ones left out: list them with --state)")
    return f"{len(jobs)} jobs named {name}*: {fmt(spent)} spent in all, of {fmt_limit(budgets)} of budgets"


LIVE_STATES = ("queued", "placed", "launching", "running", "stopping", "cancelling")
"""The states of a job that has not ended, each asked for on its own when the listing of every job is full."""


def _listed_jobs(client, *, state: str | None, team: str | None,
                 name: str | None = None) -> tuple[list[dict], str | None]:
    """The jobs ``broker status`` lists, newest first, and a note when some are left out (``None`` when none are).

    The broker answers a page of at most ``MAX_JOBS_LISTED`` jobs at a time, newest first, with a cursor to the next.
    With ``--state`` or ``--name``, every job matching is listed, page after page. Without them, the newest ``MAX_JOBS_LISTED``
    of all jobs and every job that has not ended (each live state read to its end: a queue of 5,000 is listed whole,
    where it was cut at the 1,000 newest); left out are only ended jobs older than those newest, a history that
    grows without end (100,000 jobs is minutes of paging) — the note says so, and `--state succeeded` (or failed,
    cancelled) lists them all."""
    from broker.client import MAX_JOBS_LISTED as most

    if state or name:
        # with --name too, every page: a sweep is bounded by its runs, and its total ("spent together") was of the
        # newest 1,000 alone, the older runs that had spent most left out
        jobs, complete = client.all_jobs(state=state, team=team, name=name)
        which = " ".join(x for x in (state, "jobs", f"named {name}*" if name else "") if x)
        return jobs, None if complete else (
            f"(this broker lists at most {most} jobs and has no cursor to read on: these are the {most} newest "
            f"{which}; older ones are left out — narrow it with --team, or upgrade the broker)")
    first = client.jobs_page(team=team, limit=most, name=name)
    jobs = first["jobs"]
    if len(jobs) < most or (first.get("next_cursor", "") is None):
        return jobs, None
    seen, cut = {j["id"] for j in jobs}, []
    for live in LIVE_STATES:
        more, complete = client.all_jobs(state=live, team=team, name=name)
        if not complete:
            cut.append(live)
        jobs += [j for j in more if j["id"] not in seen]
        seen.update(j["id"] for j in more)
    jobs.sort(key=lambda j: j.get("submitted_at") or "", reverse=True)  # stable: the broker's order within a second
    also = (f"; this broker has no cursor, so of {' and '.join(cut)} jobs only the {most} newest are shown" if cut
            else "")
    return jobs, (f"(shown are the {most} newest jobs and every job that has not ended; older jobs that ended are "
                  f"left out — list them with --state (succeeded, failed, cancelled or stopped_budget){also})")


def cmd_queue(args) -> int:
    """``/broker queue`` in Slack, here: the queued jobs by position, each with its rough start and why it waits."""
    from broker.client import MAX_JOBS_LISTED, queue_order

    # every queued job, page by page: the broker lists the newest first, and one page left out the jobs submitted
    # first, the next to start, from a queue of more
    with _client(args) as client:
        jobs, whole = client.all_jobs(state="queued", team=args.team, name=args.name)
    jobs = queue_order(jobs)
    if args.json:
        _print_json(jobs)
        return 0
    if not jobs:
        print(f"No job named {args.name}* is waiting." if args.name else "Nothing is waiting.")
        return 0
    due = any(j.get("deadline") for j in jobs)  # a column of its own only where a job has a deadline
    con = _console()
    # on a terminal a row to a line, its reason short, and what the short reasons leave out said once under the
    # table: at a sweep's size nearly every row wrapped one long sentence over 6 lines. Piped (`| grep`) and --json
    # each reason whole, as the broker says it.
    terminal = not getattr(con, "plain_tables", False)
    reasons = [_short_wait(j["reason"] or "") if terminal else j["reason"] for j in jobs]
    rows = [[str(j["queue_position"] or ""), j["id"], j["name"], j["team"], _short_time(j.get("estimated_start")),
             *([_short_time(j.get("deadline"), cut=True)] if due else []), j["budget"]["usd"], reason]
            for j, reason in zip(jobs, reasons)]
    _print_table(con, [("#", "whole"), ("id", "whole"), "name", "team", ("starts ~", "whole"),
                       *([("due", "whole")] if due else []), ("budget", "whole"), "waiting because"], rows,
                 drop=("team", "budget", "due", "starts ~"), same=("team",), one_line=terminal)
    notes = [note for mark, note in WAIT_NOTES if terminal and any(mark in r for r in reasons)]
    if notes:
        from rich.text import Text

        con.print(Text(f"({'; '.join(notes)}; `broker status ID`, piped or --json: each reason whole)", style="dim"))
    if not whole:
        print(f"More jobs wait than the broker lists at once ({MAX_JOBS_LISTED}): those submitted first are not shown.")
    return 0


_SHORT_WAITS = (
    (re.compile(r"^waiting: "), ""),
    (re.compile(r"\bthe (pools?) (.+?) (?:is|are) full right now"), r"\1 \2 full"),
    (re.compile(r" and the rest are over the job's max_price_per_hour of (\S+?)(?=;|$)"), r", rest over max price \1"),
    (re.compile(r"\bno start estimate: "), "no estimate: "),
    (re.compile(r"it waits behind (\S+), first in line for pool (\S+), whose start cannot be told: what comes free "
                r"there is kept for it from the jobs that give no `broker: expected_hours`, as this one gives none"),
     r"behind \1 (first for pool \2)"),
    (re.compile(r"it waits behind (\S+), which has waited more than (\d+) min for pool (\S+): what comes free there "
                r"is kept for it, and this job starts after it"), r"behind \1 (waited > \2 min for pool \3)"),
    (re.compile(r"it waits behind (.+?), ahead of it in the queue with no expected length"),
     r"behind \1 (no expected length)"),
    (re.compile(r"what it needs is held by "), "held by "),
    (re.compile(r"\(with no expected length\)"), "(no expected length)"),
    (re.compile(r"; when (?:that ends|those end) cannot be told"), ""),
)
"""A queued job's reason as ``broker queue`` shows it on a terminal, one line a row: the broker's sentences cut to
their facts, in order (:func:`_short_wait`); what they leave out is said once under the table (:data:`WAIT_NOTES`)."""

WAIT_NOTES = (
    ("no expected length", "no expected length: a job gives no broker.expected_hours, so when it ends cannot be "
                           "told, nor when those behind it start"),
    ("first for pool", "first for pool: what comes free there is kept for the first in line, from the jobs that give "
                       "no broker.expected_hours"),
)
"""What the short reasons of ``broker queue`` leave out, each said once under the table when a row needs it."""


def _short_wait(reason: str) -> str:
    """``waiting: the pool local is full right now; no start estimate: what it needs is held by j-… (with no expected
    length), and it waits behind j-…, ahead of it in the queue with no expected length; when those end cannot be
    told`` → ``pool local full; no estimate: held by j-… (no expected length), and behind j-… (no expected
    length)``. A sentence none of :data:`_SHORT_WAITS` knows is left as it is."""
    for pattern, short in _SHORT_WAITS:
        reason = pattern.sub(short, reason)
    return reason


def _given(text: str) -> str:
    """An option's value, refused when empty: the commands drop an option with no value, so `--team "$TEAM"` with
    TEAM unset listed every team's jobs, `broker status ""` every job and `--idempotency-key ""` submitted under a
    fresh key, each as if nothing had been typed. A usage error instead, as the API refuses `?team=`."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: give it a value, or leave it out for the default")
    return text


_JOB_ID = re.compile(r"(?:j-)?[0-9a-f]+", re.IGNORECASE)


def _job_id(text: str) -> str:
    """A job id as typed or pasted, as the broker spells its ids (``j-`` and lowercase hex): the spaces, tab or line
    end (``\\r\\n``) a copy brings are left out, and an id typed in capitals is lowered. Sent as given,
    ``"j-184ba8c494 "`` was a 404 "no job j-184ba8c494  (did you mean j-184ba8c494?)", a pasted line end split the
    error over two lines, and ``J-184BA8C494`` was a 404. Anything else is sent as it is, for the broker to say."""
    text = _given(text).strip()
    return text.lower() if _JOB_ID.fullmatch(text) else text


def _job_name(text: str) -> str:
    """``submit --name``, held to the rules of a task's ``name:`` (:func:`broker.spec.check_name`) here, before a
    workdir is packed and uploaded for a submit the broker would refuse."""
    from broker.spec import SpecError, check_name

    try:
        check_name(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc.reason}") from None
    return text


def _deadline(text: str) -> str:
    """``--deadline``: a duration or a time, checked by the broker (a negative one by :func:`_not_negative` first, as
    the submit's other refusals of it are: ``--deadline -1h`` was a usage error, exit 2, where they exit 1)."""
    return _given(text)


def _not_negative(deadline: str | None, *, flag: str = "--deadline") -> None:
    """Refuse ``--deadline -1h`` before anything is packed or sent, in the broker's words for a task's ``-1h``
    (``--deadline -1h`` was argparse's "expected one argument": it read the value as an option)."""
    from broker.client import BrokerError
    from broker.spec import negative_duration

    said = negative_duration(deadline) if deadline is not None else None
    if said is not None:
        raise BrokerError(0, f"{flag}: {said}", field=flag)


def _idempotency_key(text: str) -> str:
    """``--idempotency-key``, refused here when a header cannot carry it (:func:`broker.client.idempotency_key_problem`):
    sent, 'ключ' was "'ascii' codec can't encode", and ' k2 ' a dropped connection retried three times."""
    from broker.client import idempotency_key_problem

    problem = idempotency_key_problem(_given(text))
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def _port(text: str) -> int:
    """``--port``: 0 to 65535 (0: any free port). 99999 was an OverflowError's traceback from the bind."""
    from broker.client import port_number

    try:
        return port_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _attempt_number(text: str) -> int:
    """``--attempt``: attempts count from 1 (as `broker status` lists them); a 0 was read as "none given"
    and showed the newest attempt instead."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an attempt number (1, 2, ...)") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: attempts count from 1, as `broker status JOB` lists them")
    return n


def _ended(client, job_id: str) -> int:
    """The exit code of ``logs -f`` once the job followed has ended: as ``submit --wait``'s, 0 for a success and
    :data:`JOB_NOT_SUCCEEDED` for any other end, so following again after a Ctrl-C tells a script what the wait would
    have."""
    return 0 if client.job(job_id)["state"] == "succeeded" else JOB_NOT_SUCCEEDED


def cmd_logs(args) -> int:
    if args.follow:
        args.following = args.id  # what a Ctrl-C leaves running (:func:`_say_left`)
    with _client(args) as client:
        if args.follow and args.json:  # JSON Lines: one object per piece of output, as it comes, for a script to read
            for chunk in client.follow_log_chunks(args.id, attempt=args.attempt, on_status=_say_status, on_attempt_end=_say_attempt_end,
                                                on_unreachable=_say_unreachable):
                print(json.dumps(chunk), flush=True)
            return _ended(client, args.id)
        if args.follow:
            for text in client.follow_logs(args.id, attempt=args.attempt, on_status=_say_status, on_attempt_end=_say_attempt_end,
                                                on_unreachable=_say_unreachable):
                sys.stdout.write(text)
                sys.stdout.flush()
            return _ended(client, args.id)
        # every page of the attempt's output, not the broker's first 1 MiB alone (the last line cut, nothing said);
        # with --json one object of it all, `done` the last page's (the attempt ended and nothing is left to read)
        pages = client.log_pages(args.id, attempt=args.attempt)
        chunk = next(pages)
        if args.json:
            for page in pages:
                chunk = {**page, "data": chunk["data"] + page["data"]}
            _print_json(chunk)
        elif chunk["attempt"] is None:  # nothing has run yet: say where it stands, not an empty answer
            _say_status(client.job(args.id))
            print("(it ended before any attempt ran: there is no output)" if chunk.get("done") else
                  "(no output yet: `broker logs -f` follows it from its start)", file=sys.stderr)
        else:
            sys.stdout.write(chunk["data"])
            for page in pages:
                sys.stdout.write(page["data"])
    return 0


CANCEL_BATCH = 200
"""Job ids the CLI cancels in one request: each part is answered well within the client's timeout even on a slow
store (1,000 at once, behind a locked SQLite store, timed out with 750 cancelled and nothing said of them)."""


def cmd_cancel(args) -> int:
    """``broker cancel ID [ID ...]``, ``--name PREFIX``, ``--all``: each job cancelled, or skipped as already ended
    (not an error: a cancel run again over the same jobs exits 0, as ``scancel`` does), or refused (exit 1).
    ``--name`` and ``--all`` are resolved to the jobs they match here, listed and (on a terminal) confirmed, and
    those very jobs are cancelled, by id: not jobs the broker would match a moment later."""
    from broker.client import BrokerError

    with _client(args) as client:
        ids = list(args.ids)
        if args.name or args.all:
            picked = _cancel_picks(client, args)
            if picked is None:
                print("nothing cancelled", file=sys.stderr)
                return 1
            ids = picked
        done: dict[str, list] = {"cancelled": [], "already_ended": [], "refused": [], "already_cancelling": []}
        try:
            for start in range(0, len(ids), CANCEL_BATCH):
                part = client.cancel_many(ids=ids[start:start + CANCEL_BATCH])
                for key in done:
                    done[key] += part.get(key, [])  # already_cancelling: not from a broker of before it
        except BrokerError:
            if len(ids) > 1:
                print(f"error: of the {len(ids)} jobs, {len(done['cancelled'])} were cancelled before this error, and "
                      "the broker may have cancelled more: run the same command again to cancel the rest (a job "
                      "already cancelled is skipped)", file=sys.stderr)
            raise
    cancelled, ended, refused = done["cancelled"], done["already_ended"], done["refused"]
    already = set(done["already_cancelling"])
    if args.json:
        _print_json(done)
        return 1 if refused else 0
    for job in cancelled:
        # one another cancel was stopping already: two `cancel --name` at once each said it had cancelled it
        print(f"{job['id']} ({job['name']}): {job['state']}" + (" (already being cancelled)" if job["id"] in already
                                                                 else ""))
    for job in ended:
        print(f"{job['id']} ({job['name']}): had already ended ({job['state']}); skipped")
    for job in refused:
        print(f"error: {job['id']} not cancelled: {job['detail']}", file=sys.stderr)
    if len(args.ids) != 1:  # one job's line says it all
        print(_cancel_summary(args, len(cancelled) - len(already), len(ended), len(refused), len(already)))
    return 1 if refused else 0


def _cancel_picks(client, args) -> list[str] | None:
    """The ids of the jobs ``cancel --name``/``--all`` matches (not ended, newest first), once the user has said yes
    to them on a terminal (``--yes``: without asking); ``None`` when the user says no. An admin's ``--all`` without
    ``--team`` is refused before anything is listed or asked, as the broker refuses ``{"all": true}`` alone: the
    token is asked who it is (``GET /v1/whoami``). Guessed from the teams of the jobs listed, it was refused only
    while two teams had jobs not ended, and with one team's it cancelled them unnamed. A broker too old to say is
    still judged by those teams."""
    if args.all and not args.team:
        me = client.whoami()
        if me is not None and me.get("admin"):
            _refuse_all_alone()
    jobs, _ = client.all_jobs(state=",".join(LIVE_STATES), team=args.team, name=args.name)
    if args.all and not args.team and len({j["team"] for j in jobs}) > 1:  # an admin's token: a team's sees its own
        _refuse_all_alone()
    if not jobs or args.yes:
        return [j["id"] for j in jobs]
    shown = ", ".join(f"{j['id']} ({j['name']})" for j in jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5
                                                                      else "")
    teams = sorted({j["team"] for j in jobs})
    whose = f"team {teams[0]}'s" if len(teams) == 1 else f"teams {', '.join(teams)}'"
    what = f"named {args.name}*" if args.name else "not ended"
    print(f"{len(jobs)} job{'s' if len(jobs) != 1 else ''} of {whose} {what}, whoever submitted them: {shown}",
          file=sys.stderr)
    # on stderr, as the list: with stdout redirected (`> done.txt`) the question was in the file and the terminal
    # seemed to hang
    print(f"cancel {'them' if len(jobs) != 1 else 'it'}? [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()  # "" at the end of input: no
    return [j["id"] for j in jobs] if answer.strip().lower() in ("y", "yes") else None


def _refuse_all_alone() -> None:
    from broker.client import BrokerError

    raise BrokerError(422, "team: an admin cancelling all must name the team (--team T): all, alone, would cancel "
                           "every team's jobs", field="team")


def _cancel_summary(args, cancelled: int, ended: int, refused: int, already: int = 0) -> str:
    """``cancelled 12 jobs; 3 had already ended``, or what was looked for when no job was found. ``already``: jobs
    another cancel was already stopping, not counted as this one's."""
    if not (cancelled or ended or refused or already):
        team = f" of team {args.team}" if args.team else ""
        return (f"nothing to cancel: no job{team} named {args.name}* is waiting or running" if args.name
                else f"nothing to cancel: no job{team} is waiting or running")

    def jobs(n: int) -> str:
        return f"{n} job{'' if n == 1 else 's'}"

    parts = [f"cancelled {jobs(cancelled)}"]
    if already:
        parts.append(f"{already} {'were' if already > 1 else 'was'} already being cancelled")
    if ended:
        parts.append(f"{ended} had already ended" if ended > 1 else "1 had already ended")
    if refused:
        parts.append(f"{jobs(refused)} refused (above)")
    return "; ".join(parts)


def cmd_events(args) -> int:
    with _client(args) as client:
        events = client.events(args.id)
    if args.json:
        _print_json(events)
        return 0
    rows = [[str(e["seq"]), e["time"], e["event"], e["from"] or "", e["to"] or "", e["actor"], e["reason"]]
            for e in events]
    # on a narrow terminal the reason, what the event says, is kept longest: at 40 columns the table kept its time,
    # event and state columns and drew the reason zero wide
    _print_table(_console(), [("#", "whole"), ("time", "whole"), ("event", "whole"), ("from", "whole"),
                              ("to", "whole"), "by", "reason"], rows, drop=("by", "from", "#", "to", "time"))
    return 0


def _forced(call, command: str, job_id: str, force: bool) -> dict:
    """``call(job_id, force=force)``; a 409 that asks for force names the command that forces it, once, where it first
    asks ("with force", the API's word, or "with --force"). Every "with force" was replaced: "Resumed with force and
    nothing changed" read "Resumed with --force (broker ondemand j-… --force) and nothing changed"."""
    from broker.client import BrokerError

    try:
        return call(job_id, force=force)
    except BrokerError as exc:
        forcing = f"broker {command} {job_id} --force"
        if exc.status == 409 and forcing not in exc.detail:
            exc.detail = re.sub(r"\bwith (?:--)?force\b", f"with --force ({forcing})", exc.detail, count=1)
        raise


def cmd_resume(args) -> int:
    envs = _assignments(args.env, "--env") if args.env else None
    secrets = _assignments(args.secret, "--secret") if args.secret else None
    with _client(args) as client:
        job = _forced(lambda job_id, force: client.resume(job_id, force=force, envs=envs, secrets=secrets), "resume",
                      args.id, args.force)
        _done(args, job, f"{job['id']}: {job['state']} — {job['reason']}")
        if not args.json:  # where it stands once the engine has weighed it, as a submit says (a resumed job's
            # answer, "queued — resumed by …", said neither its place in the queue nor roughly when it starts)
            _say_behind(_console(), client, job["id"], since=_version_of(job))
    return 0


def cmd_budget(args) -> int:
    with _client(args) as client:
        job = client.set_budget(args.id, args.amount)
        runs = _budget_runs(client.job(job["id"])) if job["state"] in ("running", "launching") else ""
    # a raise does not restart a job its budget stopped (or is stopping: the stop was under way before the raise)
    # from its checkpoint only when it has one ("from its last checkpoint" was said of a job that saved none)
    where = "from its last checkpoint" if job.get("last_checkpoint") else "from the start (it saved no checkpoint)"
    then = {"stopped_budget": f"; stopped at its budget: `broker resume {job['id']}` continues it {where}",
            "stopping": f"; its stop at the old budget was under way: once it is stopped_budget, `broker resume "
                        f"{job['id']}` continues it {where}"}.get(job["state"], runs)
    reason = job.get("reason") or ""
    if job["state"] == "stopped_budget" and reason.startswith("stopped at its budget, since ") \
            and ": resume it to continue" not in reason:
        # the broker's word on the budget just set (broker/service.py::_raised_reason): it still does not pay for a
        # resume, or the team's monthly cap refuses one; "`broker resume` continues it" was then refused with a 409
        then = f"; {reason}"
    spent, budget = _spent_of(job)
    _done(args, job, f"{job['id']}: budget {budget} (spent {spent}){then}")
    return 0


def cmd_deadline(args) -> int:
    """``broker deadline JOB WHEN`` (or ``--none``): the job's deadline set, moved or removed, read as ``submit
    --deadline`` reads one (a time with no zone on this machine's clock: :func:`_on_this_clock`), and said as submit
    says it (``j-…: deadline 2026-12-08 09:00Z (in 16 h)``)."""
    when = None
    if not args.none:
        _not_negative(args.when, flag="deadline")
        when = _on_this_clock(args.when, quiet=args.json, flag="deadline")
    with _client(args) as client:
        job = client.set_deadline(args.id, when)
    said = f"deadline {_deadline_moment(job['deadline'])}" if job.get("deadline") else "no deadline"
    _done(args, job, f"{job['id']}: {said}")
    return 0


def _budget_runs(job: dict) -> str:
    """For a running job, how long its budget left runs it at its attempt's price, when under an hour: a budget
    lowered to just above the spend was answered "budget $0.0012 (spent $0.0003)", and the job stopped at it a
    second later, unannounced."""
    tries = job.get("attempt_list") or []
    price = ((tries[-1].get("price_per_hour") or {}).get("micros") if tries else None)
    budget, spent = (job.get("budget") or {}).get("micros"), (job.get("spent") or {}).get("micros")
    if not all(isinstance(x, int) for x in (price, budget, spent)) or price <= 0:
        return ""
    seconds = max(budget - spent, 0) * 3600 // price
    if seconds >= 3600:
        return ""
    from broker.views import duration
    from pricing.money import fmt_rate

    return (f"; at {fmt_rate(price)}/h the budget left runs it about {duration(seconds)} more, a clean stop "
            "included: it stops at its budget then (resumable once the budget is raised)")


def cmd_ondemand(args) -> int:
    if args.off:
        with _client(args) as client:
            job = client.unpin(args.id)
        _done(args, job, f"{job['id']}: not pinned; its next attempts go where it is cheapest; {job['state']}")
        return 0
    from broker.client import BrokerError

    with _client(args) as client:
        try:  # whether the switch puts it back in the queue (a stopped or failed job is resumed), said below
            was = None if args.json else client.job(args.id).get("state")
        except (BrokerError, OSError):  # the switch's own answer says what is wrong
            was = None
        job = _forced(client.switch_to_ondemand, "ondemand", args.id, args.force)
        tier = (job.get("placement") or {}).get("tier")
        now = (f" (the attempt running now stays on {tier}; the next one runs on on-demand)"
               if job["state"] in ("placed", "launching", "running") and tier and tier != "ondemand" else "")
        _done(args, job, f"{job['id']}: pinned to on-demand; {job['state']}{now}")
        if was is not None and was != "queued" and job["state"] == "queued":
            # resumed by the switch: where it stands once the engine has weighed it, as `broker resume` says
            # ("pinned to on-demand; queued" said neither its place in the queue nor roughly when it starts)
            _say_behind(_console(), client, job["id"], since=_version_of(job))
    return 0


def cmd_fault(args) -> int:
    with _client(args) as client:
        if args.kind == "zone":
            result = client.fault("zone", zone=args.target, available=args.available)
            text = f"zone {args.target}: " + {None: "follows its trace again", True: "capacity back",
                                               False: "no capacity"}[args.available]
        else:
            result = client.fault(args.kind, job_id=_job_id(args.target) if args.target.strip() else args.target)
            text = f"{args.kind} {result['attempt']}: " + ("done" if result["applied"] else "it was already ending")
    _done(args, result, text)
    return 0


def _done(args, data, text: str) -> None:
    if args.json:
        _print_json(data)
    else:
        print(text)


def _billed(seconds) -> str:
    """An attempt's billed seconds (a whole number, or exact: 16.9201335) as a span, :func:`broker.views.duration`."""
    from broker.views import duration

    return duration(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else str(seconds)


def cmd_costs(args) -> int:
    from broker.views import nothing_to_compare, ondemand_cell, saving_cell

    with _client(args) as client:
        if args.id:
            data = client.job_costs(args.id)
        else:
            params = {k: v for k, v in (("team", args.team), ("period", args.period), ("since", args.since),
                                        ("until", args.until)) if v}
            data = client.costs(**params)
    if args.json:
        _print_json(data)
        return 0
    con = _console()
    if args.id:
        job = data["job"]
        con.print(f"[bold]{job['id']}[/] {job['name']}  team={job['team']}  state={job['state']}")
        con.print(_saving_line(data["spent"], data["ondemand_equivalent"], _saving(data), _saving_percent(data)))
        if not data["attempts"]:  # an empty table said nothing of why
            con.print("  no attempt has run, so it has cost nothing")
            return 0
        # nothing to compare: each attempt's "equivalent" is its own cost, which the line above no longer names
        compared = not nothing_to_compare(_saving(data), _saving_percent(data))
        # the seconds billed, exact since attempts are billed to the part of a second ("16.9201335"), said as every
        # other span is (broker/views.py's duration, as the dashboard and Slack say them): "16 s", "12 min", "1.5 h";
        # and, where an attempt held several nodes, how many: its $/h and cost are for all of them
        nodes = [a.get("num_nodes") if isinstance(a.get("num_nodes"), int) else 1 for a in data["attempts"]]
        several = any(n > 1 for n in nodes)
        rows = [[str(a["n"]), a["state"], a["tier"], a["zone"] or "", a["instance_type"] or "",
                 *([str(n) if n > 1 else ""] if several else []),
                 a["price_per_hour"]["usd"] if a["price_per_hour"] else "", _billed(a["seconds"]), a["cost"]["usd"],
                 a["ondemand_equivalent"]["usd"] if compared else "—"] for a, n in zip(data["attempts"], nodes)]
        _print_table(con, [("#", "whole"), ("state", "whole"), ("tier", "whole"), "zone", "instance",
                           *([("nodes", "whole")] if several else []), ("$/h", "whole"),
                           ("billed", "whole"), ("cost", "whole"), ("same time on-demand", "whole")], rows,
                     drop=("instance", "zone", "billed"))
        if several:
            con.print("  $/h, cost and on-demand are for all the nodes of an attempt together", soft_wrap=True)
        if data.get("rounding_note"):
            con.print(f"  {data['rounding_note']}", soft_wrap=True)
        return 0
    tot, win = data["totals"], data["window"]
    con.print(f"[bold]{data['team'] or 'all teams'}[/], {win['since']} → {win['until']} ({win['period']})")
    con.print(_saving_line(tot["spent"], tot["ondemand_equivalent"], _saving(tot), _saving_percent(tot)))
    con.print("  by tier: " + " · ".join(f"{k} {v['usd']}" for k, v in tot["by_tier"].items()))
    for cap in data.get("monthly_caps") or ():  # this month's, whatever the window
        con.print(f"  team {cap['team']}: {cap['text']}", soft_wrap=True)
    if len(data["by_team"]) > 1:
        _print_table(con, [("team", "whole"), ("spent", "whole"), ("same time on-demand", "whole"),
                           ("against on-demand", "whole")],
                     [[r["team"], r["spent"]["usd"],
                       ondemand_cell(r["ondemand_equivalent"], _saving(r), _saving_percent(r)),
                       saving_cell(_saving(r), _saving_percent(r))] for r in data["by_team"]])
    if data["top_jobs"]:
        _print_table(con, [("most expensive", "whole"), "name", "team", ("state", "whole"), ("attempts", "whole"),
                           ("spent", "whole"), ("against on-demand", "whole")],
                     [[j["id"], j["name"], j["team"], j["state"], str(j["attempts"]), j["spent"]["usd"],
                       saving_cell(_saving(j), _saving_percent(j))]
                      for j in data["top_jobs"]], drop=("attempts", "team", "against on-demand"))
    con.print(f"  {_preemptions_line(data['preemptions'])}")
    if data.get("rounding_note"):
        con.print(f"  {data['rounding_note']}", soft_wrap=True)
    if data.get("retention_note"):
        con.print(f"  {data['retention_note']}", soft_wrap=True)
    return 0


NO_SAVING = {"micros": 0, "usd": ""}
"""A cost row's ``saving`` where the broker's answer has none: nothing to compare, said as such."""


def _saving(row: dict) -> dict:
    """A cost row's ``saving`` (a money dict), :data:`NO_SAVING` from an answer without one."""
    return row.get("saving") or NO_SAVING


def _saving_percent(row: dict) -> int | None:
    """A cost row's ``saving_percent``. A broker older than this CLI answers rows without it (its ``by_team`` rows had
    only team, spent, ondemand_equivalent, saving and by_tier), and ``broker costs`` stopped at a KeyError: worked out
    here from the exact amounts the row has, as the broker works it out (``broker.costs.percent``, rounded down);
    ``None`` (nothing to compare, said as such) where nothing was saved, for that old broker's equivalent was then the
    spend itself (on-prem work), or where the row has no figures to work it out from."""
    from broker.costs import percent

    if "saving_percent" in row:
        return row["saving_percent"]
    saving, equivalent = _saving(row)["micros"], (row.get("ondemand_equivalent") or NO_SAVING)["micros"]
    return percent(saving, equivalent) if saving else None


def _preemptions_line(pre: dict) -> str:
    """``broker costs``' line of the window's preemptions: :func:`broker.views.preemptions_words`, which Slack's
    ``costs`` says too."""
    from broker.views import preemptions_words

    return preemptions_words(pre)


def _saving_line(spent: dict, equivalent: dict, saving: dict, percent) -> str:
    from broker.views import NOTHING_TO_COMPARE, nothing_to_compare, saving_words

    if nothing_to_compare(saving, percent):  # no on-demand figure: none is named ("on on-demand: $0.0023")
        return f"  spent {spent['usd']}; {NOTHING_TO_COMPARE}"
    # the same billed seconds at on-demand prices (broker.costs.ondemand_equivalent), time redone after a preemption
    # included: "the same work" claimed a saving over work on-demand would not have had to redo
    return f"  spent {spent['usd']}; the same time on on-demand: {equivalent['usd']}; {saving_words(saving, percent)}"


COMMANDS = {
    "serve": cmd_serve, "worker": cmd_worker, "submit": cmd_submit, "status": cmd_status, "queue": cmd_queue, "logs": cmd_logs,
    "cancel": cmd_cancel, "events": cmd_events, "resume": cmd_resume, "budget": cmd_budget, "deadline": cmd_deadline,
    "ondemand": cmd_ondemand, "fault": cmd_fault, "costs": cmd_costs,
}

if __name__ == "__main__":
    sys.exit(main())
