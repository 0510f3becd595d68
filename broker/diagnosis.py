"""Failure diagnosis in plain words: a rules table from how an attempt ended to a class, a sentence and a hint.

Rules match on the launcher's phase and termination reason, the exit code or
signal, what ended it (a command of the task, or the clone of its git workdir),
and patterns in the tail of the log. Of the rules that match, the one that reads
the end of the log wins: a log often shows a problem the job got past (an OOM it
caught and retried smaller, a NCCL connect retried) before the one that ended it.
See :func:`diagnose` for the ranking: the latest match, then table order.
Teams add their own rules in a YAML file (``failure_rules:`` in the config),
read again whenever it changes, and placed before the shipped ones: a team's rule
that matches wins over every shipped one. Pure, except :class:`RuleBook`, which
reads that file.

A rule's sentence may use ``{step}`` (the last training step the log or the
progress reports show, whichever is later), ``{at_step}`` (" after step 30 (the last the job reported)": never
"at step", as that step is the last the job showed, not the one it failed at), ``{batch_size}``, ``{path}`` (a path or URL in the
matched line), ``{code}``, ``{signal}``, ``{ended}`` ("exited with code 3", "was killed by
signal 6 (SIGABRT)"), ``{what}`` ("The job", or "The setup command" when the task's setup
failed), ``{command_said}`` ("The run command", or "The setup command") and ``{command_word}`` ("run",
"setup"), ``{said}`` (the log's last line, quoted after a colon) and ``{reason}`` (the launcher's reason for the
end); a rule whose pattern has an ``exception`` group also ``{where}`` (a SyntaxError's file and
line, a RecursionError's repeated call) and ``{cause}`` (the exception a chain began with: " (caused by …)").
"""

from __future__ import annotations

import bisect
import re
import signal as signals
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from broker.spec import unknown_key_hint
from launchers.base import Phase

INFRASTRUCTURE = frozenset({"preempted", "node_lost", "stalled", "budget_stop", "cancelled", "nccl_network", "deadline",
                            "cuda_error", "terminated", "interrupted", "port_in_use", "network_error", "gpu_unavailable",
                            "mount_busy", "checkpoint_location"})
"""Classes that are not the user's code: a resume needs no confirmation."""


@dataclass(frozen=True)
class Rule:
    cls: str
    sentence: str
    hint: str = ""
    pattern: re.Pattern | None = None
    phases: frozenset[str] = frozenset()  # launcher phases it applies to (empty: any)
    exit_codes: frozenset[int] = frozenset()
    signals: frozenset[int] = frozenset()
    infrastructure: bool | None = None  # a team rule's say; None: the class decides (INFRASTRUCTURE)
    commands: frozenset[str] = frozenset()  # what ended it, as the launcher says (Ending.command; empty: any)
    # the task's secrets its hint asks for by name (a credentials rule's): Diagnosis.secrets, "secrets" in its dict
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ending:
    """How an attempt ended, as the monitor saw it."""

    phase: str
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    log_tail: str = ""
    step: int | None = None  # the last step the progress reports or checkpoints gave
    # the job reported no step to the broker during the attempt (no progress report, no checkpoint), so its running
    # view showed none: a step the sentence reads from its log for a stop or preemption says it came from there
    unreported: bool = False
    command: str | None = None  # which of the task's commands ended it: "setup" or "run" (or "workdir": its clone)
    # whether the job has a checkpoint a resume continues from (the job's last_checkpoint, of any attempt); None: not
    # known, and a hint that sends it on from "its last checkpoint" says so only if it saved one
    checkpoint: bool | None = None
    # "silent_again": the step the attempt before stalled after (the last it reported), said where this attempt shows
    # none, as it most often does: it gained no step, which is why it was not resumed
    stalled_at: int | None = None


@dataclass(frozen=True)
class Diagnosis:
    cls: str
    sentence: str
    hint: str
    infrastructure: bool
    step: int | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    # the names of the task's secrets to give the job (its hint names them): what `broker resume JOB --secret NAME`
    # takes. Empty for a failure no secret fixes
    secrets: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return f"{self.sentence} {self.hint}".strip()

    def to_dict(self) -> dict[str, Any]:
        """The diagnosis as a job stores it. ``"secrets"`` (a list of names) is there only when it names some: a
        reader treats it as optional, as a diagnosis a broker of an earlier version stored lacks it."""
        out = {"class": self.cls, "sentence": self.sentence, "hint": self.hint, "infrastructure": self.infrastructure,
               "step": self.step, "text": self.text}
        if self.secrets:
            out["secrets"] = list(self.secrets)
        return out


# torchrun's summary of the rank it saw fail first, to its exit code: "Root Cause (first observed failure):", "[0]:",
# its time and host, "rank : 1 (local_rank: 1)", then "exitcode : 143 (pid: 1958)"
_TORCHRUN_ROOT = (r"^Root Cause \(first observed failure\):\n(?:[^\n]*\n){0,4}?\s*rank\s*:\s*(?P<rank>\d+)[^\n]*\n"
                  r"\s*exitcode\s*:\s*")
# to the end of that rank's entry (its error_file and traceback lines), so that it is the latest match in the log: the
# entry's "Signal 9 (SIGKILL) received by PID" is what the unnamed SIGKILL rule matches
_TORCHRUN_ENTRY_END = r"[^\n]*(?:\n[ \t]+(?:error_file|traceback)\s*:[^\n]*){0,2}"


def _r(cls, sentence, hint="", pattern=None, phases=(), codes=(), signals=(), commands=(), secrets=()) -> Rule:
    return Rule(cls, sentence, hint, re.compile(pattern, re.I | re.M) if pattern else None,
                frozenset(phases), frozenset(codes), frozenset(signals), commands=frozenset(commands),
                secrets=tuple(secrets))


HOST_OOM_HINT = "Use a larger instance, fewer data-loader workers, or a smaller batch size."
MAYBE_HOST_OOM_HINT = ("If memory ran out (the node's kernel log, dmesg, says \"Out of memory: Killed process\"): "
                       "use a larger instance, fewer data-loader workers, or a smaller batch size. A SIGKILL also "
                       "comes from a person or a tool on the node (kill -9), or from the script itself.")
# a SIGKILL the log gives no reason for: the broker cannot tell who sent it (the kernel's OOM killer or anyone else)
UNCONFIRMED_OOM = "often the kernel's out-of-memory killer, but nothing in the log confirms it"
CRASH_HINT = ("Usually native code: a torch/CUDA build that does not match the node, a custom op or a C extension; "
              "the log's last lines show what it was doing.")
PORT_HINT = ("On a shared host another job may hold it: give each job its own port (torchrun --master_port), or "
             "--standalone for one node, and resume.")
TERMINATED = ("{what} was stopped{at_step} by SIGTERM, which the broker did not send: most likely the node was "
              "shutting down, or a person or process on it stopped the job.")
INTERRUPTED = "{what} was interrupted{at_step} by SIGINT (what Ctrl-C sends), which the broker did not send."
TERMINATED_HINT = "Not the job's own error: {resume_it}."
INTERRUPTED_HINT = ("Something on the node interrupted it (a person at a terminal, or a tool that stops processes): "
                    "{resume_it}.")
# {resume_it}, by Ending.checkpoint: a job that saved no checkpoint starts over, which "resume it to continue from
# its last checkpoint" promised otherwise
RESUME_IT = {True: "resume it to continue from its last checkpoint",
             None: "resume it to continue from its last checkpoint, if it saved one (else it starts over)",
             False: "resume it to run it again (it saved no checkpoint, so it starts over)"}
WORKDIR_CLONE_HINT = ("Not the job's code, but a resume clones the same repository at the same ref, and fails the same "
                      "way: fix the workdir's url or ref (or its credentials in the task's secrets: GIT_TOKEN for an https "
                      "url; for an ssh one GIT_SSH_KEY_PATH on a pool, the key itself as GIT_SSH_KEY on a SkyPilot "
                      "cluster) and submit again; if there was no network for a while, resume with --force.")
WORKDIR_MISSING_HINT = ("Not the job's code, but a resume looks for the same directory on the same host and fails the "
                        "same way: submit the task again with its workdir uploaded (broker submit --upload-workdir), "
                        "or make that directory exist on the host (a path there, not on the machine it was submitted "
                        "from) and resume with --force.")
FILES_NOT_SYNCED_HINT = "Not the job's code, but a resume syncs the same files and fails the same way until that is fixed."
RENDEZVOUS_HINT = ("Not the job's code: usually a node that did not start or join in time, or a flaky network between "
                   "the nodes: resume it; if it repeats, check that every node reaches the master address and port.")
GPU_UNAVAILABLE_HINT = ("Not the job's code: the node's GPUs or driver were not ready (or the task asked for no "
                        "GPUs: resources.accelerators); resume it to run on another node.")
NETWORK_HINT = ("Not the job's code: a server or the network failed for a while (a 5xx, a refused or reset "
                "connection, a DNS failure, throttling); resume it to try again.")
PREEMPTION_HANDLED_HINT = "Not the job's own error: resume it to continue from that checkpoint."
HANG_HINT = ("Usually a node, a GPU or the network between them that hung, so that one process never joined: "
             "resume it. If it stops at the same step again, the code is the likelier cause: one process working "
             "alone for longer than the timeout (evaluation or saving on rank 0 only), or processes that call "
             "different collectives; give init_process_group a longer timeout, or let every process take part.")
STALL_HINT = ("The broker resumes it from its last checkpoint. A job that stops reporting while it runs is waiting on "
              "something that never comes: a data-loader worker, a collective one process never joined, a lock, or "
              "a call to a server with no timeout. If it stalls again before it gets past this step, it is not "
              "resumed a second time.")
STALLED_AGAIN_HINT = ("Likely the code, since it stops at the same place each time: find where it waits (py-spy dump "
                      "--pid on the node, or faulthandler.dump_traceback_later in the script prints every thread's "
                      "stack), fix it, and resume with --force; raise heartbeat_timeout_seconds if a step can "
                      "rightly take that long.")
HF_OFFLINE_HINT = ("Not the network: the job runs with Hugging Face's offline mode on (HF_HUB_OFFLINE=1 or "
                   "TRANSFORMERS_OFFLINE=1 in its environment, or local_files_only=True in the code), so it reads only "
                   "the cache, and a resume fails the same way. Download the model into the cache the job reads "
                   "(HF_HOME) before it runs, point it at a local copy, or unset HF_HUB_OFFLINE; then resume with "
                   "--force.")
RESUME_WITH = ("broker resume JOB --secret NAME sets one from the next attempt on (no value: your shell's), which "
               "continues from the last checkpoint; a resume without it runs with the secrets the job was submitted "
               "with, and fails the same way.")
READ_LOG_HINT = "Read the end of its log for the cause."
SILENT_HINT = ("It printed nothing before it exited: run its command by hand to see what it does, or add logging before "
               "the point where it exits.")
AWS_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
# an expired temporary credential (STS) needs its session token too
_SESSION_TOKEN_CODES = frozenset({"ExpiredToken", "ExpiredTokenException"})
DIVERGED_HINT = ("Not a crash of the code but of the numbers: lower the learning rate, add warmup or gradient "
                 "clipping, check the data for bad values, and under fp16 use a GradScaler (or bf16). A resume with "
                 "--force continues from the last checkpoint with the same settings, and most often diverges again "
                 "at about the same step.")
SHM_HINT = "Give the node more shared memory (a container's --shm-size), or use fewer data-loader workers."
# a script's own command-line parser (argparse, click) refusing the arguments it was given: it exits 2 before doing
# anything, and the same command fails the same way
BAD_ARGUMENTS_HINT = ("A resume runs the same command and fails the same way: fix the task's {command_word} command "
                      "(or the file it reads its arguments from) and submit the task again; if the argument comes from "
                      "one of the task's envs, resume with that env changed instead (broker resume JOB --env "
                      "NAME=value).")
# a resume runs on a disk of the task's resources.disk_size, which it does not change: "resume --force" alone meets the
# same full disk. keep_last is the checkpoint library's, said only where the file was a checkpoint's
DISK_FULL_AGAIN = ("A resume gets a disk of the same size (resources.disk_size is the task's, which a resume does not "
                   "change): for a larger one, submit the task again with a larger resources.disk_size (and "
                   "broker.checkpoint set to this job's location to continue from its last checkpoint); once the job "
                   "writes less there, a resume with --force continues it.")
DISK_FULL_HINT = ("Free space on that disk: have the job write less there, or write its outputs to object storage. "
                  + DISK_FULL_AGAIN)
DISK_FULL_CHECKPOINT_HINT = ("Keep fewer checkpoints (keep_last=N needs room for N + 1: the N kept and the one being "
                             "written), or write them to object storage (broker.checkpoint: s3://… or gs://…). "
                             + DISK_FULL_AGAIN)

# the checkpoint location (broker.checkpoint) a task names: the broker does not create a bucket, and a resume goes on
# with the same location, so the bucket is fixed where it is, or the task is submitted again with another
CHECKPOINT_LOCATION_HINT = ("Not the job's code, but its checkpoint location (broker.checkpoint): {fix}; then resume "
                            "it (no --force needed). Or submit the task again with broker.checkpoint pointing at a "
                            "location it can use.")

SHIPPED_RULES: tuple[Rule, ...] = (
    _r("preempted", "Spot capacity was preempted{at_step}.",
       "The broker resumes it from its last checkpoint elsewhere.", phases=["preempted"]),
    _r("node_lost", "The node running the job was lost{at_step}, and no exit was recorded.",
       "The broker resumes it from its last checkpoint.", phases=["lost", "gone"]),
    # the broker stopped a job that fell silent past heartbeat_timeout_seconds (broker/engine/reconcile.py): its
    # reason is how long it had been silent; a second time with no step gained between, it is not resumed
    _r("stalled", "The job stalled{at_step}: it reported no progress for {reason}, so the broker stopped it.",
       STALL_HINT, phases=["silent"]),
    _r("stalled_again", "The job stalled again{at_step}, with no progress since it last stalled: it reported "
       "nothing for {reason}, so the broker stopped it and did not resume it.", STALLED_AGAIN_HINT,
       phases=["silent_again"]),
    _r("budget_stop", "Stopped at its budget{at_step}.", "Raise the budget and resume to continue.",
       phases=["budget"]),
    _r("cancelled", "Cancelled{at_step}.", "", phases=["cancelled"]),
    # an attempt the local launcher did not run at all (launchers/local_runner.py, NotRun): it says why as its log's
    # "[spot-broker] …: not run: …" line (which _readable keeps) and ends as its setup exiting 1, though no command
    # of the task ran. A path workdir is read on the host that runs the job, not where it was submitted: a resume
    # meets the same missing directory until it is there
    _r("workdir_missing", "Nothing of the job ran: its workdir {workdir} is not a directory on the host that was to "
       "run it.", WORKDIR_MISSING_HINT,
       r"^\[spot-broker\] workdir (?P<workdir>[^\n]+?): not run: there is no such directory on this host",
       phases=["failed"]),
    # the pool's run_as user (the broker's config) is not on its host, or its folders cannot be given to it: the
    # pool's, and a resume on it meets it again
    _r("run_as_user", "Nothing of the job ran: its pool runs its jobs as the user '{user}', and {why}.",
       "Not the job's code, but the pool's run_as setting: an administrator makes that user on the pool's host (or "
       "fixes the pool's run_as in the broker's config); then resume with --force.",
       r"^\[spot-broker\] not run: its pool runs it as user '(?P<user>[^'\n]+)', and (?P<why>[^\n]+?)\s*$",
       phases=["failed"]),
    # a file_mounts destination another job on the host holds now (its uploaded copy mounted there): free once it ends
    _r("mount_busy", "Nothing of the job ran: its file_mounts destination {dest} is in use on its host by another "
       "job's mounted copy.",
       "Jobs on one host share its paths: resume it once the other job has ended, or submit it again with another "
       "destination for that mount.",
       r"^\[spot-broker\] file_mounts (?P<dest>[^\n]+?): not run: (?:another job on this host has its own copy "
       r"mounted|it is under another job's copy mounted)", phases=["failed"]),
    # a git workdir the local launcher could not clone (launchers/local_runner.py): its reason says why in plain words
    _r("workdir_clone", "Its workdir was not cloned, so nothing of the job ran: {reason}.", WORKDIR_CLONE_HINT,
       phases=["failed"], commands=["workdir"]),
    # the workdir (a path) or a file_mounts entry SkyPilot could not copy or mount onto the cluster
    # (launchers/skypilot_status.py): its reason names the entry, what failed and what to fix
    _r("files_not_synced", "Its files did not reach the cluster, so nothing of the job ran: {reason}.",
       FILES_NOT_SYNCED_HINT, phases=["failed"], commands=["file_mounts", "workdir_sync"]),
    # the checkpoint library's sentence when a script that never called close() ends and its last save was not kept
    # (checkpoint/checkpointer.py, _close_at_exit): it exits 1 and says so as its last line
    _r("checkpoint_not_saved", "The training ended, but its last checkpoint (step {ckpt_step}) was not saved to "
       "{store}: {why}.",
       "The steps after the checkpoint before it are not kept. Check the checkpoint store (the bucket, the job's "
       "credentials, free space), and call close() at the end of the script to see such an error where it happens; "
       "a resume continues from the last checkpoint that was saved.",
       r"^The last checkpoint \(step (?P<ckpt_step>\d+)\) was not saved to (?P<store>\S+?): (?P<why>.+?); the "
       r"script ended without calling close\(\)", phases=["failed"]),
    # the checkpoint library's restore() refusing to start over when every committed checkpoint it found is damaged
    # (checkpoint/checkpointer.py, _all_damaged): not the code's error, and a resume fails the same way until they are
    # checked and moved away
    _r("checkpoints_damaged", "The training could not resume: {which} checkpoint under {store} {how}: {why}.",
       "Check them with `checkpoint verify {store}`; restore an intact copy there, or move them away (or delete them) "
       "to start the training afresh, then resume the job with --force (its task is unchanged: what it read is "
       "what was fixed).",
       r"CheckpointError: (?P<which>every|no) checkpoint under (?P<store>\S+) (?P<how>is damaged|can be restored, "
       r"and some are damaged): (?P<why>.+?)\. Nothing was restored", phases=["failed"]),
    # the checkpoint library's own error for its base (checkpoint/storage.py: S3Storage._call's "OSError: <uri>: An
    # error occurred (NoSuchBucket) …", an fsspec store's "OSError: <uri>: bucket 'b' does not exist, or these
    # credentials cannot see it"), whatever raised it on (restore, a save, close): the task's broker.checkpoint, not
    # the code. A resume once the bucket is there (or the credentials may use it) runs: no --force
    # (INFRASTRUCTURE). Credentials missing altogether are the credentials rules' (they name the secrets to give)
    _r("checkpoint_location", "The checkpoint location {ckpt_base} cannot be used{at_step}: the bucket {bucket} does "
       "not exist.", CHECKPOINT_LOCATION_HINT.format(fix="create the bucket (where the job's credentials may write)"),
       r"\bOSError: (?P<ckpt_uri>[a-z][a-z0-9+]*://(?P<bucket>[^/\s:]+)[^\s:]*): An error occurred \(NoSuchBucket\)",
       phases=["failed"]),
    _r("checkpoint_location", "The checkpoint location {ckpt_base} cannot be used{at_step}: the bucket {bucket} does "
       "not exist, or the job's credentials cannot see it.",
       CHECKPOINT_LOCATION_HINT.format(fix="create the bucket, or give the job credentials that can see it ("
                                           "broker resume JOB --secret NAME)"),
       r"\bOSError: (?P<ckpt_uri>[a-z][a-z0-9+]*://[^\s:]+): bucket '(?P<bucket>[^'\n]+)' does not exist, or these "
       r"credentials cannot see it", phases=["failed"]),
    _r("checkpoint_location", "The checkpoint location {ckpt_base} cannot be used{at_step}: the job's credentials are "
       "denied access to it ({aws_call}: {ckpt_code}).",
       CHECKPOINT_LOCATION_HINT.format(fix="let the job's credentials read and write there (the bucket's policy, the "
                                           "role's or user's permissions), or give it others (broker resume JOB "
                                           "--secret NAME)"),
       r"\bOSError: (?P<ckpt_uri>[a-z][a-z0-9+]*://(?P<bucket>[^/\s:]+)[^\s:]*): An error occurred \((?P<ckpt_code>"
       r"AccessDenied|AllAccessDisabled|Forbidden|403)\) when calling the (?P<aws_call>\w+) operation",
       phases=["failed"]),
    # GCS's 403, as the checkpoint library says it (checkpoint.storage: gcsfs's "Forbidden: <URL>" on one line with the
    # object, the bucket and GCS's reason): was "The training script raised OSError … Fix the error in the code"
    _r("checkpoint_location", "The checkpoint location {ckpt_base} cannot be used{at_step}: GCS denies the job's "
       "credentials access to the bucket {bucket} (403 Forbidden).",
       CHECKPOINT_LOCATION_HINT.format(fix="let the job's credentials read and write there (the bucket's IAM roles, "
                                           "such as Storage Object User for its service account), or give it others "
                                           "(broker resume JOB --secret NAME)"),
       r"\bPermissionError: (?P<ckpt_uri>gs://[^\s:]+): GCS denied these credentials access to bucket "
       r"'(?P<bucket>[^'\n]+)' \(403 Forbidden\)", phases=["failed"]),
    # the checkpoint library's own errors for a local base (checkpoint/checkpointer.py: _uncreatable, _unwritable,
    # and a background save refused for a size limit, a read-only file system or a permission, with its note): the
    # place the checkpoints go, not the code. Read as the script's CheckpointError, it asked for --force, and a
    # /proc/… base's FileNotFoundError read as "Could not read" though it was a write
    _r("checkpoint_location", "The checkpoint location {ckpt_base} cannot be used{at_step}: the checkpoint library "
       "says it {ckpt_why}.",
       CHECKPOINT_LOCATION_HINT.format(fix="make it a directory the job can write on the node that runs it, or "
                                           "one the job can create (a path under no file, on a file system mounted "
                                           "read-write)"),
       r"\bCheckpointError: checkpoint base (?P<ckpt_base>/[^\n]*?) (?P<ckpt_why>cannot be created: [^\n]*?|is a "
       r"file, not a directory|is not writable by this process[^\n]*?)\.?[ \t]*$", phases=["failed"]),
    _r("checkpoint_location", "The checkpoint location {ckpt_base} cannot be used{at_step}: the checkpoint of step "
       "{ckpt_step} could not be written there: {ckpt_error}{ckpt_note}.",
       "Not the job's code, but where its checkpoints are written: a file of a checkpoint is over the size limit, "
       "the process's (a `ulimit -f` in the task's commands, or the node's limits) or the file system's. Raise that "
       "limit, or checkpoint to another file system or to object storage (broker.checkpoint); a resume needs no "
       "--force, but runs the task's commands as they were submitted: a limit set there needs the task submitted "
       "again.",
       r"\bCheckpointError: background checkpoint save failed: the checkpoint of step (?P<ckpt_step>\d+) could not "
       r"be written(?: to (?P<ckpt_to>/[^\n]*?))?: (?P<ckpt_error>\w*Error: \[Errno 27\] [^\n]*?)"
       r"(?P<ckpt_note> \(a file is over the size limit[^\n]*\))?[ \t]*$", phases=["failed"]),
    _r("checkpoint_location", "The checkpoint location {ckpt_base} cannot be used{at_step}: the checkpoint of step "
       "{ckpt_step} could not be written there: {ckpt_error}{ckpt_note}.",
       CHECKPOINT_LOCATION_HINT.format(fix="let the job write there (the directory's owner and permissions, a file "
                                           "system mounted read-write, no other run saving to the same base)"),
       r"\bCheckpointError: background checkpoint save failed: the checkpoint of step (?P<ckpt_step>\d+) could not "
       r"be written(?: to (?P<ckpt_to>/[^\n]*?))?: (?P<ckpt_error>\w*Error: \[Errno (?:30|13|1|2)\] [^\n]*?)"
       r"(?P<ckpt_note> \((?:a read-only file system|no permission to write there|the operation is not permitted "
       r"there|the checkpoint's folder was deleted|the folder it goes in could not be created)[^\n]*\))?[ \t]*$",
       phases=["failed"]),
    # a resume runs the task as it was submitted: the batch size is changed where the run reads it, not by resuming
    _r("gpu_oom", "Out of GPU memory{batch}{at_step}.",
       "Try a smaller batch size, gradient accumulation or activation checkpointing. A resume continues from the last "
       "checkpoint (if one was saved) with the task as it was submitted: change the batch size where the run reads it "
       "first, then resume with --force (a workdir that is a path on the broker's host is read anew at each attempt; "
       "an uploaded one is not: submit the task again); where an env sets it, resume with --env NAME=value instead.",
       # an allocation outside PyTorch's caching allocator (a CUDA context, a library's workspace) fails as
       # "CUDA error: out of memory"
       # NCCL's own buffers: torch's "NCCL error … unhandled cuda error", "Last error:", "Cuda failure 'out of memory'"
       r"CUDA (?:error: )?out of memory|torch\.(cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|HIP out of memory"
       r"|Cuda failure (?:\d+ )?'out of memory'"),
    # NCCL refusing how it was called is the job's set-up, not the network: most often two processes on one GPU (no
    # torch.cuda.set_device(LOCAL_RANK), or more processes than GPUs); a resume fails the same way
    _r("user_code_error", "Two of the job's processes used the same GPU (NCCL: Duplicate GPU detected){at_step}.",
       "Give each process its own GPU: torch.cuda.set_device(int(os.environ[\"LOCAL_RANK\"])) before "
       "init_process_group, and no more processes on a node than it has GPUs (torchrun --nproc_per_node).",
       r"Duplicate GPU detected"),
    _r("user_code_error", "NCCL refused how the job called it (invalid usage or argument){at_step}.",
       "Not the network: the code's calls or its devices are wrong for NCCL; run with NCCL_DEBUG=WARN to see why.",
       r"NCCL error[^\n]*\binvalid (?:usage|argument)|\bnccl(?:InvalidUsage|InvalidArgument)\b"),
    # NCCL's buffers between the GPUs of one node live in /dev/shm: a container's 64 MB one is too small (torch prints
    # "unhandled system error", then NCCL's "Last error:"), which a resume on the same kind of node meets again
    _r("host_oom", "NCCL could not create its shared memory segment in /dev/shm (too small, or not "
       "writable){at_step}.", "Give the node more shared memory (a container's --shm-size, or --ipc=host), or set "
       "NCCL_SHM_DISABLE=1 so that NCCL does without it.",
       r"Error while creating shared memory segment|failed to extend /dev/shm/"),
    # a collective that a process never joined in time (NCCL's watchdog; NCCL_BLOCKING_WAIT; gloo): a symptom. When
    # the job's own failure shows too, that is the cause (_without_hang_fallout, _root_cause); alone, most often a
    # node, GPU or link that hung
    _r("nccl_network", "The job's processes stopped waiting for each other{at_step}: a collective operation{op} did "
       "not finish within {timeout}.", HANG_HINT,
       r"(?:collective operation timeout(?::? )?|\bWork (?=WorkNCCL\([^\n]*timed out in blocking wait))"
       r"(?:WorkNCCL\((?:[^)\n]*?OpType=(?P<op>\w+))?(?:[^)\n]*?Timeout\(ms\)=(?P<timeout_ms>\d+))?)?"
       r"|Timed out waiting (?P<gloo_ms>\d+)ms for (?:recv|send) operation to complete"),
    _r("nccl_network", "A NCCL/network error stopped the job{at_step}.",
       "Usually a flaky node or network: resume it; if it repeats, check NCCL_* settings.",
       r"NCCL (error|WARN.*(timeout|Connection))|nccl(?:System|Remote|Internal|UnhandledCuda)Error|Connection reset by peer.*(gloo|nccl)"
       r"|NCCL communicator was aborted|setting up NCCL communicator[^\n]*got error"),
    # torch.distributed's store and rendezvous: the ranks could not reach each other (a DistNetworkError's "client
    # socket has timed out", a DistStoreError's "waiting for clients. 1/2 clients joined"); not a port another process
    # holds (port_in_use)
    _r("nccl_network", "The job's processes could not connect to each other (torch.distributed "
       "rendezvous){at_step}.", RENDEZVOUS_HINT,
       r"\b(?:Dist(?:Network|Store)Error|Rendezvous(?:Timeout|Connection|Closed)Error)\b"
       r"(?![^\n]*(?:EADDRINUSE|Address already in use))"),
    # Hugging Face's offline mode (HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1, or local_files_only=True) and a model or
    # file not in the node's cache: the job's own setting, which a resume meets again. transformers then says "We
    # couldn't connect to 'https://huggingface.co' to load the files" (below: a network failure), chained to
    # huggingface_hub's "…outgoing traffic has been disabled…" or "…: offline mode is enabled. To disable it, please
    # unset the `HF_HUB_OFFLINE` environment variable." (OfflineModeIsEnabled; older versions say "Offline mode is
    # enabled. Tried to reach …"): one traceback, read as one line, where this rule comes first
    _r("hf_offline", "A Hugging Face model or file was not in the node's cache, and offline mode "
       "(HF_HUB_OFFLINE, or local_files_only) kept it from being downloaded{at_step}.", HF_OFFLINE_HINT,
       r"outgoing traffic has been disabled|\boffline mode is enabled\b|\bOfflineModeIsEnabled\b"
       r"|unset the `?HF_HUB_OFFLINE`?"),
    # pip that retried its index for a broken connection and then found no version: the network's, not a package
    # that does not exist (below). The match runs to pip's last line, where it ranks; it comes before the rule
    # below, which would match the retry's line alone and leave the rest of the log to later rules
    _r("network_error", "A server or the network failed{at_step}: {said_net}.", NETWORK_HINT,
       r"^(?P<said_net>WARNING: Retrying \(Retry\([^\n]*)\n(?:[^\n]*\n)*?[^\n]*No matching distribution found for "
       r"[^\s]+"),
    # transient failures of a server or the network while fetching data, weights or packages; a 404 or a package
    # that does not exist is the job's (data_not_found, or the code's error)
    _r("network_error", "A server or the network failed{at_step}: {said_net}.", NETWORK_HINT,
       r"^(?P<said_net>[^\n]*(?:\b5\d\d (?:Server Error|Service Unavailable|Bad Gateway|Gateway Time-?out)"
       r"|\b429 (?:Client Error: )?Too Many Requests|Connection refused|Connection reset by peer"
       r"|Temporary failure in name resolution|We couldn't connect to '[^'\n]*' to load"
       r"|\((?:SlowDown|Throttling|ThrottlingException|RequestLimitExceeded"
       r"|ServiceUnavailable|InternalError)\)|Read timed out)[^\n]*)$"),
    _r("data_not_found", "Could not read {path}{at_step}.", "Check the path and the job's credentials.",
       r"(?:FileNotFoundError|NoSuchKey|NoSuchBucket|No such file or directory|404 Not Found|does not exist)[^\n]{0,300}?(?P<path>(?:s3|gs|gcs|az|hdfs|file)://[^\s'\"]+|/[^\s'\":]+)"),
    _r("storage_access", "Access to {path} was denied{at_step}.", "Check the job's credentials and bucket policy.",
       r"(?:AccessDenied|403 Forbidden|PermissionError)[^\n]{0,300}?(?P<path>(?:s3|gs)://[^\s'\"]+|/[^\s'\":]+)"),
    # credentials the job was not given, or that a service refused: the task's secrets, which a resume meets again
    # unless it gives them (secrets=: the names its hint asks for, Diagnosis.secrets). Google Cloud's names none: its
    # key is a file in the task's file_mounts, which a resume with --secret cannot add
    _r("credentials", "The job has no AWS credentials{at_step}: boto3 found none to sign a request with.",
       "Give the job its credentials as secrets, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run it where an "
       "instance role grants them. " + RESUME_WITH,
       r"NoCredentialsError|Unable to locate credentials", secrets=AWS_KEYS),
    _r("credentials", "AWS refused the job's credentials ({aws_code}){at_step}.",
       "The access key is wrong, revoked or expired (or its clock is off): give the job current credentials as "
       "secrets (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and AWS_SESSION_TOKEN for a temporary one). "
       + RESUME_WITH,
       r"\((?P<aws_code>InvalidAccessKeyId|SignatureDoesNotMatch|ExpiredToken|ExpiredTokenException|"
       r"InvalidClientTokenId|UnrecognizedClientException|RequestTimeTooSkewed)\)", secrets=AWS_KEYS),
    _r("storage_access", "AWS denied the job's request{at_step}: {aws_call} (AccessDenied).",
       "The job's credentials lack that permission, or the bucket's policy refuses them: check both.",
       r"\(AccessDenied\) when calling the (?P<aws_call>\w+) operation"),
    _r("credentials", "The job has no Google Cloud credentials{at_step}: google-auth found none.",
       "Give the job a service account key (GOOGLE_APPLICATION_CREDENTIALS naming a key file in its file_mounts: "
       "submit the task again with them, broker.checkpoint set to this job's checkpoint_uri to continue from its "
       "checkpoints), or run it where the node's service account has access.",
       r"DefaultCredentialsError|Could not automatically determine credentials|default credentials were not found"),
    _r("credentials", "Hugging Face refused the job access to {hf_repo}{at_step}: the model is gated or private, and "
       "the job's token is missing or has no access to it.",
       "Accept the model's terms on its Hub page with the account whose token the job uses, and give the job that "
       "token as the secret HF_TOKEN. " + RESUME_WITH,
       r"(?:Access to model |have access to it at https://huggingface\.co/|gated repo for url https://huggingface\.co/)"
       r"(?P<hf_repo>[\w-]+/[\w.-]*[\w-])", secrets=["HF_TOKEN"]),
    _r("credentials", "Hugging Face refused the job's token (401: invalid, or none given for a private or "
       "gated model){at_step}.",
       "Give the job a valid token with access to the model as the secret HF_TOKEN. " + RESUME_WITH,
       r"401 Client Error[^\n]*huggingface\.co|Invalid user token|Invalid credentials in Authorization header",
       secrets=["HF_TOKEN"]),
    _r("credentials", "Weights & Biases has no API key{at_step}, so wandb could not log in.",
       "Give the job WANDB_API_KEY as a secret, or WANDB_MODE=offline as an env (broker resume JOB --env "
       "WANDB_MODE=offline). " + RESUME_WITH,
       r"api_key not configured|wandb\.errors\.(?:UsageError|AuthenticationError)[^\n]*(?:api[_ ]key|login)",
       secrets=["WANDB_API_KEY"]),
    # the task's setup or run asking for what the node does not have: the same task fails the same way
    _r("dependency_missing", "{what} could not install {pkg}: pip found no version of it that fits (a misspelt name, a "
       "version that does not exist, or none built for this Python and platform).",
       "Check the name and the version (pip index versions <name> lists them) and the node's Python; fix the task's "
       "setup and submit it again.",
       r"No matching distribution found for (?P<pkg>[^\s]+)"),
    _r("dependency_missing", "{what} could not run {cmd}: there is no such command on the node.",
       "Install it in the task's setup (torchrun comes with pip install torch, accelerate with pip install "
       "accelerate), or activate the environment that has it in the run command (a PATH the task sets in its envs "
       "or secrets must still hold the command's directory); then submit the task again.",
       r"^(?:[^\n]*?: )?(?:line \d+: |\d+: )?(?P<cmd>[\w.+-]+): (?:command )?not found\s*$", codes=[127]),
    # the local runner could not start the command at all (launchers/local_runner.py, Runner._launch_failed): the
    # task's own doing (its environment and script too large for the kernel, ...), and nothing of it ran
    _r("not_started", "The {step} command could not be started on the node, so nothing of it ran: {why}.",
       "If the argument list is too long, the task's envs, secrets and script together are too large for the node: "
       "put large values in a file (file_mounts, or a bucket) and pass its path, or the script in a file in the "
       "workdir. Then submit the task again.",
       r"^\[spot-broker\] (?P<step>setup|run) command: not run: it could not be started on this host: "
       r"(?P<why>[^\n]+?)\.?\s*$"),
    _r("script_not_found", "{what} could not open the script {path}: there is no such file.",
       "The run command names a file that is not there: check its name, and that the task's workdir holds it (the "
       "run starts in the workdir); then submit the task again.",
       r"can't open file '(?P<path>[^'\n]+)': \[Errno 2\]"),
    # argparse's usage error ("usage: train.py [-h] …" then "train.py: error: …", exit 2); torchrun's own parser says
    # it as "torchrun: error: …", so {prog} names whose arguments they were
    # torchrun's own check of --nproc_per_node, an AssertionError with no message raised in torch's elastic agent: read
    # as "the training script raised AssertionError", where the script never started (SKYPILOT_NUM_GPUS_PER_NODE is 0
    # on a CPU instance, and --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE gave torchrun 0 processes a node)
    _r("bad_arguments", "{command_said} gives torchrun no process to start on a node (--nproc_per_node is 0 or less), "
       "so the training script never ran.", "On an instance without GPUs SKYPILOT_NUM_GPUS_PER_NODE is 0: give "
       "--nproc_per_node=1 (or the number of processes you want) there, or ask for a GPU instance, and submit again.",
       r"WorkerSpec\($(?:\n[^\n]*){0,6}?\n[^\n]*elastic/agent/server/api\.py\", line \d+, in __post_init__\n\s*"
       r"raise AssertionError\s*\nAssertionError\s*$", phases=["failed"]),
    _r("bad_arguments", "{command_said} passes {prog} arguments it does not take: {args} (argparse's usage error).",
       BAD_ARGUMENTS_HINT, r"^(?P<prog>[^\s:][^\n:]*): error: unrecognized arguments: (?P<args>[^\n]*?)\s*$",
       phases=["failed"]),
    _r("bad_arguments", "{command_said} leaves out arguments that {prog} requires: {args} (argparse's usage error).",
       BAD_ARGUMENTS_HINT,
       r"^(?P<prog>[^\s:][^\n:]*): error: the following arguments are required: (?P<args>[^\n]*?)\s*$",
       phases=["failed"]),
    _r("bad_arguments", "{command_said} gives {prog} an argument it does not accept: {argerr} (argparse's usage "
       "error).", BAD_ARGUMENTS_HINT,
       r"^(?P<prog>[^\s:][^\n:]*): error: (?P<argerr>(?:argument [^\n:]+|ambiguous option): [^\n]*?)\s*$",
       phases=["failed"]),
    # click's ("Usage: train.py [OPTIONS]", "Try 'train.py --help' for help.", then "Error: No such option: --stepz")
    _r("bad_arguments", "{command_said} passes the script an argument it does not accept (click's usage error): "
       "{argerr}.", BAD_ARGUMENTS_HINT,
       r"^Error: (?P<argerr>(?:No such option|Missing (?:option|argument|parameter)|Invalid value for|Got unexpected "
       r"extra arguments?)\b[^\n]*?)\.?\s*$", phases=["failed"]),
    _r("cuda_mismatch", "The job's CUDA build does not match the node's driver{at_step}: {said_cuda}.",
       "Install a PyTorch built for the node's CUDA version (nvidia-smi shows it; pip install torch --index-url "
       "https://download.pytorch.org/whl/cu121 and the like), or use an image whose driver is new enough; then submit "
       "the task again.",
       r"(?P<said_cuda>NVIDIA driver on your system is too old[^\n]*?(?=\. |\.?$)|CUDA driver version is insufficient for "
       r"CUDA runtime version|libcud(?:art|nn|a)\.so(?:\.\d+)*: cannot open shared object file)"),
    _r("setup_error", "pip refused to install into the node's system Python (an externally managed environment, "
       "PEP 668).",
       "Install into a virtual environment (python -m venv ~/venv, then . ~/venv/bin/activate in both the setup and "
       "the run), or pass --break-system-packages to pip install; then submit the task again.",
       r"externally-managed-environment"),
    # pip building a package from source runs its setup.py in an isolated environment that has only its declared
    # build requirements: flash-attn's imports torch, which the task's environment may well have
    _r("dependency_missing", "{what} could not build a Python package from source: its build needs {module}, "
       "which pip's isolated build environment does not have.",
       "Install {module} earlier in the setup, then build the package with pip install --no-build-isolation (as "
       "flash-attn's instructions say), or pin a version that has a prebuilt wheel for this Python.",
       r"^[ \t]+ModuleNotFoundError: No module named '(?P<module>[^']+)'\n[ \t]+\[end of output\]"),
    # {missing_said}, {missing_hint}: a well-known package's name is told to pip; another name may be the user's own
    # code left out of the workdir, which `pip install` of that name would not bring (see _missing_module)
    _r("dependency_missing", "{missing_said}", "{missing_hint}",
       r"ModuleNotFoundError: No module named '(?P<module>[^']+)'"),
    _r("host_oom", "Out of host memory{at_step}: the kernel killed the process.",
       HOST_OOM_HINT,
       r"Killed\s*$|MemoryError|Cannot allocate memory|oom-kill", codes=[137], signals=[9]),
    # SIGKILL with nothing in the log to say why: memory is a likely cause, not a certain one (a script that kills
    # itself, or kill -9 on the node, ends the same way)
    _r("host_oom", "{killed}: " + UNCONFIRMED_OOM + ".",
       MAYBE_HOST_OOM_HINT,
       codes=[137], signals=[9]),
    # the rank torchrun saw killed first, named: its peers were stopped by torchrun after it
    _r("host_oom", "Rank {rank} (pid {pid}) was killed by SIGKILL{at_step}, and torchrun stopped the other ranks: "
       + UNCONFIRMED_OOM + ".", MAYBE_HOST_OOM_HINT,
       _TORCHRUN_ROOT + r"-9\s*\(pid:\s*(?P<pid>\d+)\)" + _TORCHRUN_ENTRY_END,
       phases=["failed"]),
    # torchrun exits 1 and names a worker's signal only in its summary ("exitcode : -9", "Signal 9 (SIGKILL)");
    # `accelerate launch` (one process) in its CalledProcessError ("Command '[…]' died with <Signals.SIGKILL: 9>.")
    _r("host_oom", "A training process was killed by SIGKILL{at_step}: " + UNCONFIRMED_OOM + ".", MAYBE_HOST_OOM_HINT,
       r"Signal 9 \(SIGKILL\) received by PID|^\s*exitcode\s*:\s*-9\b|CalledProcessError: .* died with "
       r"<Signals\.SIGKILL: 9>", phases=["failed"]),
    _r("crash", "A training process crashed with a segmentation fault{at_step}.",
       CRASH_HINT,
       r"Signal 11 \(SIGSEGV\) received by PID|^\s*exitcode\s*:\s*-11\b|CalledProcessError: .* died with "
       r"<Signals\.SIGSEGV: 11>", phases=["failed"]),
    # a data-loader worker's death is re-raised in the main process as a RuntimeError: not the code's error
    # torch passes a tensor between processes (a data-loader worker's batch) through a file in /dev/shm: a container's
    # 64 MB one fills, and the write fails with ENOSPC, which is not the disk
    _r("host_oom", "The job ran out of shared memory (/dev/shm){at_step}: torch could not pass a tensor between its "
       "processes.", SHM_HINT, r"unable to write to file </torch_[^>\n]*>", phases=["failed"]),
    _r("host_oom", "A data-loader worker ran out of shared memory (/dev/shm){at_step}.",
       SHM_HINT, r"DataLoader worker \(pid[^)]*\) is killed by signal: Bus error|insufficient shared memory \(shm\)",
       phases=["failed"]),
    _r("host_oom", "A data-loader worker was killed{at_step}, most likely by the kernel for lack of host memory.",
       HOST_OOM_HINT, r"DataLoader worker \(pid[^)]*\) (?:is killed by signal: Killed|exited unexpectedly)",
       phases=["failed"]),
    # {allocation}: the size the log names ("the job could not allocate 64.0 GiB"), else "an allocation failed"
    _r("host_oom", "Out of host memory{batch}{at_step}: {allocation}.",
       HOST_OOM_HINT,
       r"DefaultCPUAllocator: can't allocate memory|^MemoryError\b|Cannot allocate memory"
       r"|_ArrayMemoryError\b|Unable to allocate [\d.]+ [KMGTPE]?i?B for an array", phases=["failed"]),
    # a file of a checkpoint (the library's …/step-<12 digits>-<13 digits>/… folder, or its exit sentence's store)
    _r("disk_full", "The disk is full{at_step}: the checkpoint could not write {path}.",
       DISK_FULL_CHECKPOINT_HINT,
       r"(?:No space left on device|Disk quota exceeded)[^\n]{0,300}?(?P<path>(?:(?:s3|gs|gcs|file)://[^\s'\"]*?|/"
       r"[^\s'\":]*?)/step-\d{12,}-\d{13,}(?:/[^\s'\":]*)?)"),
    _r("disk_full", "The disk is full{at_step}: could not write {path}.",
       DISK_FULL_HINT,
       r"(?:No space left on device|Disk quota exceeded)(?:[^\n]{0,300}?(?P<path>(?:s3|gs|gcs|file)://[^\s'\"]+|/[^\s'\":]+))?"),
    _r("disk_full", "torch.save could not finish writing a checkpoint{at_step}; most often the disk is full.",
       DISK_FULL_HINT,
       r"inline_container\.cc:\d+\] \. unexpected pos \d+ vs \d+|PytorchStreamWriter failed writing file"),
    # a device-side assert is the job's own indexing (a label >= the number of classes), not the node
    _r("user_code_error", "A CUDA kernel's assertion failed (device-side assert){at_step}.",
       "Usually an index out of range, such as a label >= the number of classes; run a step on CPU, or with "
       "CUDA_LAUNCH_BLOCKING=1, to see which op.",
       # not "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", which ends every CUDA error
       r"device-side assert(?!ions)"),
    # a node whose GPUs are not ready (the driver still initializing, a GPU fallen off the bus)
    _r("gpu_unavailable", "The node's GPUs were not available to the job{at_step}.", GPU_UNAVAILABLE_HINT,
       r"No CUDA GPUs are available|cudaGetDeviceCount\(\)[^\n]*Error 802|Error 802: system not yet initialized"
       r"|Found no NVIDIA driver on your system|NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
       r"driver"),
    _r("cuda_error", "A CUDA error stopped the job{at_step}.",
       "Often a bad node or driver: resume it; if it repeats, run with CUDA_LAUNCH_BLOCKING=1 to find the op.",
       r"CUDA error: (?!out of memory)|cudaErrorIllegalAddress"),
    # jobs on one host share its network: two torchruns with one --master_port (SkyPilot's examples use 8008)
    _r("port_in_use", "{what} could not listen on port {port}{at_step}: another process on its host holds it.",
       PORT_HINT, r"port: (?P<port>\d+)[^\n]*EADDRINUSE", phases=["failed"]),
    _r("port_in_use", "{what} could not listen on a port{at_step}: another process on its host holds it.",
       PORT_HINT, r"EADDRINUSE|\[Errno 98\] Address already in use|RuntimeError: Address already in use",
       phases=["failed"]),
    # a stop the broker sends (cancel, preemption, budget) ends in its own phase: in "failed", SIGTERM or SIGINT came
    # from elsewhere. torchrun turns either into a SignalException and exits 1, which read as the script's own error
    _r("terminated", TERMINATED, TERMINATED_HINT, phases=["failed"],
       codes=[143], signals=[15]),
    # one rank SIGTERMed on the node (`kill PID`): its peers die of the lost peer ("Connection closed by peer … a
    # remote worker crashing"), whose traceback read as the script's own error, to resume only with --force; torchrun's
    # summary names the rank it saw fail first, and how (exit 143, or -15)
    _r("terminated", "Rank {rank} (pid {pid}) was stopped{at_step} by SIGTERM, which the broker did not send, and the "
       "other ranks lost it: most likely the node was shutting down, or a person or process on it stopped that "
       "process.", TERMINATED_HINT,
       _TORCHRUN_ROOT + r"(?:143|-15)\s*\(pid:\s*(?P<pid>\d+)\)" + _TORCHRUN_ENTRY_END, phases=["failed"]),
    _r("terminated", TERMINATED, TERMINATED_HINT,
       r"SignalException: Process \d+ got signal: 15\b", phases=["failed"]),
    _r("interrupted", INTERRUPTED,
       INTERRUPTED_HINT, phases=["failed"], codes=[130], signals=[2]),
    # the checkpoint library's last word when a stop notice came (checkpoint/checkpointer.py): the job handled a
    # preemption or termination; a wrapper (`timeout -s TERM` exits 124) may have changed its exit code
    _r("terminated", "{what} was stopped by a notice (a preemption or SIGTERM){at_step} and exited after committing "
       "its checkpoint {ckpt}; it {ended}.", PREEMPTION_HANDLED_HINT,
       r"(?:preempted|stopped \([^)]*\)): checkpoint (?P<ckpt>\S+) committed, exiting", phases=["failed"]),
    _r("interrupted", INTERRUPTED,
       INTERRUPTED_HINT, r"SignalException: Process \d+ got signal: 2\b", phases=["failed"]),
    # Python turns SIGINT into a KeyboardInterrupt; uncaught, its traceback ends the log, and the process often exits
    # 1 rather than by the signal (a wrapper, a handler that re-raised it): still a SIGINT, not the code's error
    _r("interrupted", INTERRUPTED,
       INTERRUPTED_HINT, r"^KeyboardInterrupt\s*$", phases=["failed"]),
    # a loss or gradient that became NaN or infinite, which the script (or torch's anomaly detection, clip_grad_norm_'s
    # error_if_nonfinite, DeepSpeed's fp16 loss scaler) raised on: the training diverged, which a resume as it is
    # repeats from the same checkpoint
    _r("diverged", "The training diverged{at_step}: the loss or gradients became NaN or infinite "
       "({exception}{message}).", DIVERGED_HINT,
       r"^(?P<exception>[A-Za-z_][\w.]*(?:Error|Exception)|Exception): (?P<message>[^\n]*?(?:\b(?:loss|grad\w*)\b[^\n]*?"
       r"(?<![\w-])(?:nan|inf|infinite|non-finite|not finite)\b|(?<![\w-])(?:nan|inf|infinite|non-finite|not finite)\b"
       r"[^\n]*?\b(?:loss|grad\w*)\b|returned nan values|loss scale already at minimum)[^\n]*)$", phases=["failed"]),
    # an exception with no message (a bare `assert`, `raise StopIteration`): the line that raised it is what says why
    _r("user_code_error", "{script} raised {exception}{at_step}, with no message, at {file}, line "
       "{lineno}{src}{cause}.",
       "Fix the error in the code; the log shows the traceback.",
       r"^[ \t]*File \"(?P<file>[^\"\n]+)\", line (?P<lineno>\d+)[^\n]*\n(?:[ \t]+(?P<src>\S[^\n]*?)[ \t]*\n)?"
       r"(?:[ \t]*[\^~][\^~ \t]*\n)*(?P<exception>[A-Za-z_][\w.]*(?:Error|Exception)|Exception|StopIteration)[ \t]*$"
       r"(?!\n[ \t]*\n(?:During handling of the above|The above exception))",  # not the first of a chain
       phases=["failed"]),
    # {where}: a SyntaxError's file and line; {cause}: the exception it was chained to (diagnose)
    _r("user_code_error", "{script} raised {exception}{at_step}{message}{where}{cause}.",
       "Fix the error in the code; the log shows the traceback.",
       r"^(?P<exception>[A-Za-z_][\w.]*(?:Error|Exception)|Exception): (?P<message>.*)$", phases=["failed"]),
    _r("crash", "{what} crashed with a segmentation fault{at_step}.",
       CRASH_HINT, phases=["failed"], codes=[139], signals=[11]),
    # the catch-all: with a log the job printed nothing to, its hint is SILENT_HINT (diagnose)
    _r("user_code_error", "{what} {ended}{at_step}{said}.", READ_LOG_HINT,
       phases=["failed"]),
)

# "step 1200", "Step: 1200", "global_step=1200", "'step': 1200", "iteration 1200", "iter 1200:", fairseq's
# "num_updates=1200", a whole float ("global_step=1200.0"); not Docker's build steps ("Step 2/7 : RUN pip install
# ..."), nor a float rounded (NeMo's bar shows "global_step=3.2e+4" for step 32040: the bar's own count says it)
_STEP = re.compile(r"(?:\b(?:global_)?step|\biter(?:ation)?|\bnum_updates)['\"]?[ =:]+(\d+)(?:\.0+)?"
                   r"(?!\d|\.\d|e[+-]?\d)(?!\s*/\s*\d+\s+:)", re.I)
# a progress bar (tqdm: HF Trainer, Lightning): " 40%|████      | 1200/3000 [10:00<15:00"; not one that loads or
# fetches (files, checkpoint shards, a dataset's map) or prepares a dataset (HF datasets' "Generating train split",
# run_clm.py's "Grouping texts in chunks of 1024", TRL's "Packing train dataset"), or evaluates, nor a script's bar
# over its epochs ("Epoch:  30%|███       | 3/10", where Lightning's "Epoch 0:" names the epoch its batches are of)
_BAR = re.compile(r"^(?P<what>[^\n|]*)\|[^\n|]*\| *(\d+)/(?P<total>\d+) \[\d(?P<rest>[^\n]*)", re.M)
_NOT_TRAINING_BAR = re.compile(r"fetch|load|download|upload|file|shard|\bmap\b|filter|token|eval|valid|predict|test"
                               r"|dataset|generat|extract|resolv|checksum|saving|group|chunk|pack|convert|\bsplit"
                               r"|\bepochs?\b(?!\s*\d)", re.I)
# tqdm draws a bar below another (its position 1, as HF Trainer's evaluation bar under its training bar, or
# Lightning's validation bar) and moves the cursor back up after it: "\n\r 45%|████▌     | 45/100 [00:05<00:06]\x1b[A"
_CURSOR_UP = "\x1b[A"
# HF Trainer's evaluation, where its logging is at INFO (the example scripts, log_level="info"): "***** Running
# Evaluation *****" before its bar, and its metrics after it ("{'eval_loss': 1.91, …}", or trainer.log_metrics's
# "***** eval metrics *****" then "  eval_loss = 1.91"); a log collector that strips escape codes leaves only these
_EVAL_START = re.compile(r"\*{3,} *Running (?:Evaluation|Prediction|eval\w*|predict\w*|test\w*|validation)\b[^\n]*", re.I)
_EVAL_END = re.compile(r"['\"](?:eval|test|predict)_\w+['\"] *:|^ *(?:eval|test|predict)_\w+ *=|\*{3,} *Running training\b",
                       re.I | re.M)
# Lightning's bar counts the batches of its epoch: only the first epoch's count is the step
_LATER_EPOCH = re.compile(r"\bEpoch\s+0*[1-9]", re.I)
# a batch size the log names ("batch_size 64", "batch size: 64", "'batch_size': 64", "--batch-size 64",
# "per_device_train_batch_size=8", HF Trainer's "Instantaneous batch size per device = 8"), with the words joined to
# it before (``qualifier``: "per_device_train_", "eval "), which say whose batch it is (:func:`training_batch_size`)
_BATCH = re.compile(r"(?<!\w)(?P<qualifier>(?:[a-z]+[_ -]){0,3}?)batch[_ -]size(?:[_ ]per[_ ](?:device|gpu))?['\"]?"
                    r"[ =:]+(?P<size>\d+)(?!\d|\.\d)", re.I)
# a batch size of evaluation, not of training: "eval batch size 64", "per_device_eval_batch_size=8", "--val-batch-size"
_NOT_TRAINING_BATCH = frozenset({"eval", "evaluation", "evaluate", "val", "valid", "validation", "test", "testing",
                                 "inference", "infer", "predict", "prediction"})


def training_batch_size(log_tail: str) -> str | None:
    """The last training batch size the log names, for the out-of-memory sentences ("Out of GPU memory (batch size
    64)"), whose hint is to make it smaller: not an evaluation's ("eval batch size 128", "per_device_eval_batch_size=
    128", "--val-batch-size 128"), nor one printed in an evaluation the log announced (HF Trainer's "***** Running
    Evaluation *****" then "Batch size = 128"), which the sentence quoted as if the training's. ``None`` when it
    names none."""
    text = log_tail.replace("\r", "\n")
    evaluating = _evaluations(text)
    found = [m.group("size") for m in _BATCH.finditer(text)
             if not _NOT_TRAINING_BATCH.intersection(re.split(r"[_ -]+", m.group("qualifier").lower()))
             and not any(start <= m.start() < end for start, end in evaluating)]
    return found[-1] if found else None


def _evaluations(text: str) -> list[tuple[int, int]]:
    """(start, end) of each evaluation the log announced (:data:`_EVAL_START` to :data:`_EVAL_END`, or the log's end)."""
    spans = []
    for start in _EVAL_START.finditer(text):
        end = _EVAL_END.search(text, start.end())
        spans.append((start.start(), end.start() if end else len(text)))
    return spans


def last_step(log_tail: str) -> int | None:
    """The last training step the log shows: a step or iteration it names, or a training progress bar's count.
    A bar drawn below another (tqdm's cursor-up after it) is not read while the log shows a training bar above it:
    HF Trainer draws its evaluation bar, which has no description, there, and its count is not the step. Where a
    log collector stripped the escape codes, the evaluation bar is known otherwise: drawn between "***** Running
    Evaluation *****" and its metrics (``'eval_loss':``), or, without those, a bar of another total drawn while the
    training bar was unfinished (HF's at 1200/3000, then 45/100: the evaluation's batches), until the training bar
    is drawn again. A bar that starts after the one before it finished (an epoch's bar, then the next's) is read.
    A bar drawn after the script's own "step N/TOTAL" lines is read only where it has their total: one of another
    total counts something else (a plain ``tqdm(range(313))`` over the evaluation's batches, which has no
    description), whose 140 read as step 140 after "step 1200/5000". After step lines with no total, a bar is read
    as before: nothing tells its count from a step's."""
    text = log_tail.replace("\r", "\n")  # a progress bar redraws itself after a carriage return
    found = [(m.start(), m.group(1)) for m in _STEP.finditer(text)]
    totals = [(m.start(), int(m.group(1))) for m in _STEP_OF.finditer(text)]  # their "step N/TOTAL"
    evaluating = _evaluations(text)  # (start, end) of each evaluation the log announced
    bars = [(m.start(), m.group(2), int(m.group("total")), _CURSOR_UP in m.group("rest"))
            for m in _BAR.finditer(text)
            if not _NOT_TRAINING_BAR.search(m.group("what")) and not _LATER_EPOCH.search(m.group("what"))
            and not any(start <= m.start() < end for start, end in evaluating)]
    outer = any(not below for _, _, _, below in bars)
    training: tuple[int, bool] | None = None  # the training bar's total, and whether it was unfinished
    for at, count, total, below in bars:
        if below and outer:
            continue
        if training is not None and total != training[0] and training[1]:
            continue  # drawn below the unfinished training bar, its escape codes stripped
        if not _fits_steps(at, total, totals):
            continue  # not a count of the steps the script's own lines count
        training = (total, int(count) < total)
        found.append((at, count))
    return int(max(found)[1]) if found else None


def _fits_steps(at: int, total: int, totals: list[tuple[int, int]]) -> bool:
    """Whether a bar of ``total`` drawn at ``at`` may go on from the "step N/TOTAL" lines printed before it
    (:func:`last_step`): it has their total ("step 1200/5000", then a bar of 5000). With no such line before it, the
    bar may be the log's count of steps."""
    said = [of for place, of in totals if place < at]
    return not said or said[-1] == total


# an exception's line ("ValueError: loss is nan at step 37", "[rank1]: RuntimeError: …"), wherever it is printed
_ERROR_LINE = re.compile(r"^\s*(?:\[(?:default)?rank\d+\]:\s?)?[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b:")


def _without_errors(log_tail: str) -> str:
    """The log without its tracebacks (their frames and exception lines) and any other exception's line: the steps
    a sentence may name are those the job showed it got past. A step an error names ("loss is nan at step 37", a
    failed save's "the checkpoint of step 10 …") is not one: the one the job failed at, or another it was about;
    "after step 37" read as if it had got past the step it failed at."""
    if "Error" not in log_tail and "Exception" not in log_tail and "Interrupt" not in log_tail:
        return log_tail
    kept, inside = [], False
    for line in log_tail.replace("\r", "\n").split("\n"):
        if line.strip().endswith(_TRACEBACK):
            inside = True
        elif inside and line.strip() and not line[:1].isspace():
            inside = False  # its exception line, the last of it
        elif not inside and not _ERROR_LINE.match(line):
            kept.append(line)
    return "\n".join(kept)


# "step 1200/3000", "Step: 1200 / 3000", "iter 1200/3000": a count the script prints against its own total
_STEP_OF = re.compile(r"(?:\b(?:global_)?step|\biter(?:ation)?)['\"]?[ =:]+\d+\s*/\s*(\d+)\b", re.I)
SHORT_HINT = ("If it was meant to train to the end, see what ended its loop early (a break or sys.exit(0), a data "
              "iterator that ran out, a max_steps or epochs setting); {kept}")
# {kept}, by Ending.checkpoint: a job that saved none has no checkpoint to go on from
SHORT_KEPT = {True: "its last checkpoint is kept, and the task submitted again with broker.checkpoint set to this "
                    "job's checkpoint_uri continues from it.",
              None: "if it saved a checkpoint, its last one is kept, and the task submitted again with "
                    "broker.checkpoint set to this job's checkpoint_uri continues from it.",
              False: "it saved no checkpoint, so the task submitted again trains from the beginning."}


PIP_NAMES = {
    "cv2": "opencv-python", "sklearn": "scikit-learn", "skimage": "scikit-image", "PIL": "pillow", "yaml": "pyyaml",
    "bs4": "beautifulsoup4", "Crypto": "pycryptodome", "dateutil": "python-dateutil", "dotenv": "python-dotenv",
    "attr": "attrs", "google.protobuf": "protobuf", "jwt": "pyjwt", "magic": "python-magic", "git": "gitpython",
    "Levenshtein": "python-levenshtein", "faiss": "faiss-cpu", "serial": "pyserial", "fitz": "pymupdf",
    "docx": "python-docx",
}
"""Imports whose package on PyPI has another name (``import cv2`` comes with ``pip install opencv-python``)."""


def _pip_install(module: str) -> str:
    """What installs ``module``, for the hint: ``pip install opencv-python`` for cv2; for a module inside a package
    (``transformers.models.llama4``), that package, in a version that has it — the package is likely there already, in
    a version without that module."""
    top = module.split(".")[0]
    name = PIP_NAMES.get(module) or PIP_NAMES.get(top) or top.replace("_", "-")
    if "." in module and module not in PIP_NAMES:
        return f"pip install {name} (a version of it that has {module}; an older one may be installed)"
    return f"pip install {name}" + (f" (the package {module} comes in)" if name != top.replace("_", "-") else "")


WELL_KNOWN = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "torchdata", "torchmetrics", "transformers", "datasets",
    "tokenizers", "accelerate", "peft", "trl", "deepspeed", "einops", "flash_attn", "xformers", "bitsandbytes",
    "safetensors", "huggingface_hub", "sentencepiece", "tiktoken", "evaluate", "timm", "lightning",
    "pytorch_lightning", "triton", "vllm", "numpy", "scipy", "pandas", "polars", "pyarrow", "matplotlib", "seaborn",
    "wandb", "mlflow", "tensorboard", "tensorboardX", "tqdm", "omegaconf", "requests", "boto3", "botocore", "s3fs",
    "fsspec", "gcsfs", "h5py", "zarr", "numba", "jax", "flax", "optax", "tensorflow", "keras", "onnx", "onnxruntime",
    "fairscale", "nltk", "spacy", "sympy", "networkx", "rich", "click", "pydantic", "fire", "jsonlines",
    "webdataset", "sacrebleu", "jsonargparse", "psutil", "xgboost", "lightgbm", "gymnasium", "opt_einsum",
})
"""Imports known to be published on PyPI under their own name (``_`` as ``-``): with :data:`PIP_NAMES`, the names a
missing module's hint tells to ``pip install``. Any other may be the user's own code left out of the workdir, which
``pip install`` of that name would not bring (but would install whatever PyPI has under it)."""


def _missing_module(module: str, what: str) -> tuple[str, str]:
    """The sentence and hint for ``ModuleNotFoundError: No module named 'module'``. A well-known package
    (:data:`WELL_KNOWN`, :data:`PIP_NAMES`) is told to pip by name; another name is as likely the user's own code (a
    package of the workdir not uploaded, or not on the import path), so that comes first, and the package that
    provides it is not guessed: PyPI may well have something else under that name."""
    top = module.split(".")[0]
    if module in PIP_NAMES or top in PIP_NAMES or top in WELL_KNOWN:
        return f"A Python dependency is missing: {module}.", f"Add it to the task's setup: {_pip_install(module)}."
    return (f"{what} could not import {module}: Python found no module of that name.",
            f"If {module} is your own code, check that it is in the task's workdir (and not left out by a "
            f".gitignore or .skyignore, which the upload follows) and on the import path (the run starts in the "
            f"workdir; a package elsewhere needs PYTHONPATH or pip install -e); otherwise add the package that "
            f"provides it to the task's setup. Then submit the task again.")


_ALLOCATION_SIZE = re.compile(r"Unable to allocate (?P<size>[\d.]+ [KMGTPE]?i?B)\b"
                              r"|you tried to allocate (?P<bytes>\d+) bytes", re.I)


def _allocation_size(log_tail: str, match: re.Match) -> str | None:
    """The size a failed host allocation asked for, as its line says it (numpy's "Unable to allocate 64.0 GiB for an
    array …"; torch's "DefaultCPUAllocator: can't allocate memory: you tried to allocate 68719476736 bytes", as
    "64.0 GiB"), or None."""
    start = log_tail.rfind("\n", 0, match.start()) + 1
    end = log_tail.find("\n", match.end())
    found = _ALLOCATION_SIZE.search(log_tail[start:] if end < 0 else log_tail[start:end])
    if found is None:
        return None
    if found.group("size"):
        return found.group("size")
    size, unit = float(found.group("bytes")), "bytes"
    for each in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024:
            break
        size, unit = size / 1024, each
    return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"


def _last_total(log_tail: str) -> int | None:
    """The total of the last "step N/M" the log prints (the script's own count of its steps), if any."""
    last = _last_match(_STEP_OF, log_tail)
    return int(last.group(1)) if last is not None else None


# Where a stop the broker made (its budget, a cancel) or a preemption names a step the job never reported (it prints
# "step 36/100" but reports through neither the checkpoint library nor BROKER_PROGRESS_URL), the sentence says so: the
# job's status showed no step while it ran ("the attempt started"), and "Stopped at its budget at step 36" read as the
# broker having known one. The running view is not fed from the log: its step is what the run reported (it is what
# heartbeat_timeout_seconds, the rate and the steps lost go by), and reading every running attempt's log each tick is
# a whole download on SkyPilot (its API server's tail_logs). A failure is diagnosed from its log anyway, and says so.
# a checkpoint's own directory, or an attempt's fence, under a checkpoint base (checkpoint/layout.py)
_CHECKPOINT_PART = re.compile(r"/(?:step-\d{12,}-\d{13,}|ATTEMPT-[^/]+)(?:/.*)?$")
LOG_STEP_SAID = frozenset({"budget", "cancelled", "preempted"})
LOG_STEP_NOTE = "the job reported no progress to the broker, so none was shown while it ran"
# The step a sentence names is the last one the job showed, never the one it failed at: a script reports (and prints)
# every so many steps, and one that failed at step 37 showed 30 last; the log's traceback names no step. So a sentence
# says "after step 30" and where that step came from: the job's own report to the broker (its progress reports, its
# checkpoints), or else the last step its log names. "Out of GPU memory at step 30" claimed a step it did not fail at.
STEP_REPORTED = "the last the job reported"
STEP_IN_LOG = "the last in the job's log"


def _after_step(step: int | None, ending: Ending) -> str:
    """What a sentence's ``{at_step}`` says: `` after step 30 (the last the job reported)``, or `` after step 36 (the
    last in the job's log)`` for a step only its log names; with :data:`LOG_STEP_NOTE` for a stop or preemption of a
    job that reported none; empty for no step. "After": the job got that far, and failed or stopped some time later."""
    if step is None:
        return ""
    said = STEP_REPORTED if ending.step == step else STEP_IN_LOG
    if ending.step is None and ending.unreported and ending.phase in LOG_STEP_SAID:
        said += f": {LOG_STEP_NOTE}"
    return f" after step {step} ({said})"


def diagnose(ending: Ending, rules: tuple[Rule, ...] = SHIPPED_RULES) -> Diagnosis:
    """The rule that explains how the ending's log ends, rendered as a sentence and a hint.

    A team's rule (one placed before the shipped table) that holds wins over every shipped rule, wherever in the log
    it matched: teams know their logs. Among the team's rules, and among the shipped ones, the one whose last match
    is latest in the log wins: what ended the job is printed last, and a problem the job got past (a CUDA OOM caught
    and retried with a smaller batch, a NCCL connect retried, a sample skipped for a missing file) before it. Latest
    is by line, and one Python traceback (with the exceptions chained to it, "During handling of the above
    exception" / "The above exception was the direct cause", and a data-loader worker's "Original Traceback") counts
    as one line, and a ``CalledProcessError``'s with no traceback before it (the script's own ``check=True``) as the
    line before it, whose failure it reports; at the same line table order decides, so a specific rule beats the
    generic "raised an exception" one. Python's shutdown noise after the traceback, a launcher's own traceback after
    its child's (the ``CalledProcessError`` of ``accelerate launch``), and under torchrun its ChildFailedError and
    the ranks it stopped after the one that failed first, are not read at all (:func:`_after_shutdown_noise`,
    :func:`_without_launcher_traceback`, :func:`_root_cause`); nor is a collective's timeout (NCCL's watchdog) after
    the job's own failure, a peer that waited on the process that failed (:func:`_without_hang_fallout`).

    A rule without a pattern reads the ending, not the log. One that names an exit code, a signal or a command ranks
    as if it matched the log's last line (the exit is the last thing that happened: a SIGKILL outranks an OOM the job
    caught long before it, but a last line "Killed" has its own rule first). A SIGSEGV or SIGABRT after a traceback
    with no progress after it (no step, no progress bar) is the process crashing as it tears down (a NCCL
    communicator's or a CUDA context's destructor): an exit-code rule then ranks as that traceback, and table order
    decides, where the shipped segfault rule comes after the rules a traceback matches (a NCCL error, then the
    shell's "Segmentation fault (core dumped)", is the NCCL error; a segfault with no traceback, or after one the job
    went on from, is a crash). One that names only phases keeps its place in the table against the winner: placed
    first (preempted, lost, budget, cancelled, a team's), it wins whatever the log says; placed last (the shipped
    catch-all), only when nothing else matched.
    """
    # progress reports are rate-limited and checkpoints periodic: the log often shows a later step
    known = [s for s in (ending.step, last_step(_without_errors(ending.log_tail))) if s is not None]
    step = max(known) if known else None
    at_step = _after_step(step, ending)
    if step is None and ending.stalled_at is not None and ending.phase == "silent_again":
        at_step = f" after step {ending.stalled_at} (where it stalled the time before)"
    batch = training_batch_size(ending.log_tail)
    log_tail = _without_hang_fallout(
        _without_launcher_traceback(_after_shutdown_noise(_root_cause(_readable(ending.log_tail)))))
    if ending.phase == "succeeded":  # whatever the log says (a caught OOM, a warning), nothing went wrong
        total = _last_total(_readable(ending.log_tail))
        if step is not None and total is not None and step < total:  # but it may have stopped short of its end
            return Diagnosis("succeeded", f"The job succeeded (its command exited 0), but the last step it showed was "
                             f"{step} of {total}.", SHORT_HINT.format(kept=SHORT_KEPT[_has_checkpoint(ending)]),
                             False, step, {"step": step, "total_steps": total})
        return Diagnosis("succeeded", f"The job succeeded{f' at step {step}' if step is not None else ''}.", "",
                         False, step)
    rule, match = _choose(ending, rules, log_tail)
    if rule is not None:
        facts = {"step": step, "code": ending.exit_code, "signal": ending.signal,
                 "batch_size": batch,
                 "at_step": at_step,
                 "batch": f" (batch size {batch})" if batch else "",
                 "ended": _ended(ending), "what": "The setup command" if ending.command == "setup" else "The job",
                 "command_word": "setup" if ending.command == "setup" else "run",
                 "command_said": "The setup command" if ending.command == "setup" else "The run command",
                 "script": _script(ending),
                 "resume_it": RESUME_IT[_has_checkpoint(ending)],
                 "killed": _killed(ending, at_step),
                 "said": f': "{line}"' if (line := _last_line(log_tail)) else "",
                 "reason": ending.reason.rstrip(".") or "?",
                 **({k: v for k, v in match.groupdict().items() if v} if match else {})}
        if facts.get("message"):
            facts["message"] = ": " + _clip_message(facts["message"]).rstrip(".")
        if facts.get("src"):
            facts["src"] = ": " + _clip(facts["src"], 160).rstrip(".")
        if match is not None and "exception" in match.re.groupindex and match.group("exception"):
            facts.update(_raised_where(log_tail, match))
        if facts.get("said_net"):
            facts["said_net"] = '"' + _said_net(facts["said_net"]) + '"'
        if facts.get("module"):
            facts["pip_install"] = _pip_install(facts["module"])
            facts["missing_said"], facts["missing_hint"] = _missing_module(facts["module"], facts["what"])
        if match is not None and "{allocation}" in rule.sentence:
            size = _allocation_size(log_tail, match)
            facts["allocation"] = f"the job could not allocate {size}" if size else "an allocation failed"
        if match is not None and "timeout_ms" in match.re.groupindex:  # the abort's line repeats the timeout's, or not
            for each in match.re.finditer(log_tail):
                for key, value in each.groupdict().items():
                    if value:
                        facts.setdefault(key, value)
        if facts.get("op"):
            facts["op"] = f" ({facts['op']})"
        if (ms := facts.get("timeout_ms") or facts.get("gloo_ms")) is not None:
            facts["timeout"] = f"its timeout of {_duration(int(ms))}"
        if facts.get("ckpt_error") and not facts.get("ckpt_base"):  # a local save's: the folder, or the file named
            facts["ckpt_uri"] = facts.get("ckpt_to") or _quoted_path(facts["ckpt_error"])
            facts.setdefault("ckpt_note", "")
        if facts.get("ckpt_uri"):  # a save names its checkpoint's directory (…/step-…-…/…): the location is above it
            facts["ckpt_base"] = _CHECKPOINT_PART.sub("", facts["ckpt_uri"].rstrip("/"))
        if facts.get("ckpt_error") and not facts.get("ckpt_base"):  # an error that named no path
            facts["ckpt_base"] = "of the job (broker.checkpoint)"
        if match is not None and match.groupdict().get("path"):
            facts["path"] = _whole_path(match)
        facts.setdefault("path", "a file")
        facts.setdefault("module", "a module")
        facts.setdefault("exception", "an exception")
        facts.setdefault("message", "")
        facts.setdefault("op", "")
        facts.setdefault("timeout", "its timeout")
        for key in ("where", "cause", "src"):
            facts.setdefault(key, "")
        sentence, hint = _fill(rule.sentence, facts), _fill(rule.hint, facts)
        sentence, hint = _background_said(rule, match, log_tail, ending, sentence, hint)
        if rule.hint == READ_LOG_HINT and not _readable(ending.log_tail).strip():
            hint = SILENT_HINT  # no log to read: the broker's own lines aside, the job printed nothing
        secrets = rule.secrets
        if secrets == AWS_KEYS and facts.get("aws_code") in _SESSION_TOKEN_CODES:
            secrets += ("AWS_SESSION_TOKEN",)
        return Diagnosis(rule.cls, sentence, hint,
                         rule.cls in INFRASTRUCTURE if rule.infrastructure is None else rule.infrastructure, step,
                         {k: v for k, v in facts.items() if v is not None}, secrets)
    return Diagnosis("unknown", f"The job ended ({ending.phase}).", "", False, step)


def _has_checkpoint(ending: Ending) -> bool | None:
    return None if ending.checkpoint is None else bool(ending.checkpoint)


def _killed(ending: Ending, at_step: str) -> str:
    """How a SIGKILL with no reason in the log is said: as the launcher's own word where it saw the signal; where it
    saw only exit code 137 (``bash -c`` running the command reports its child's SIGKILL so, and so does a script's own
    ``exit 137``), as that code, which "The process was killed by SIGKILL" said as fact."""
    if ending.signal is None and ending.exit_code == 137:
        who = "The setup command" if ending.command == "setup" else "The run command" if ending.command else "The job"
        return f"{who} exited with code 137{at_step}, which is how a shell reports a process killed by SIGKILL"
    return f"The process was killed by SIGKILL{at_step}"


def _script(ending: Ending) -> str:
    """Who raised a Python exception, for the user_code_error sentences: the setup command's own (a data
    preparation script it runs) is not the training script's, which "The training script raised" said it was."""
    return "The setup command" if ending.command == "setup" else "The training script"


BACKGROUND_HANG_HINT = ("If the job waited on that {kind} (it fed the data, or filled a queue the training loop "
                        "reads), that is the cause, and a resume stops the same way: fix it first. ")


def _background_said(rule: Rule, match: re.Match | None, log_tail: str, ending: Ending, sentence: str,
                     hint: str) -> tuple[str, str]:
    """The sentence and hint, with what a thread of the job that died of an exception (:data:`_BACKGROUND`) says.

    A thread's traceback is not how a process ended: its main thread goes on, or waits on it forever. So before a
    hang (a collective's timeout; a job the broker stopped as silent past its heartbeat; a node lost) the hang stays the
    diagnosis, resumed as one, and the thread's death is told as what to look at first: a thread that fed the
    training loop stalls it again after a resume. Before, its exception was named as the cause of the failure, and
    a hang on a node (a logging thread that died long before, say) needed --force to resume. Only when nothing else
    explains the end (the job's own exception rule matched the thread's line, and nothing after it) is the thread's
    exception the diagnosis: then it is named as the thread's, not the script's."""
    if rule.hint == HANG_HINT or rule.cls in ("node_lost", "stalled", "stalled_again"):
        deaths = _background_deaths(_readable(ending.log_tail))
        if deaths:
            died = deaths[-1]
            on = f" on rank {died.rank}" if died.rank is not None else ""
            kind = died.who.split(" ", 1)[0]
            return (f"{sentence.rstrip('.')}. Before that, the job's {died.who} died{on}: {died.said}.",
                    BACKGROUND_HANG_HINT.format(kind=kind) + hint)
        return sentence, hint
    if match is not None and rule.sentence.startswith("{script} raised"):
        places = _Places(log_tail)
        if places.of(match) in places.background:
            header = _last_match(_BACKGROUND_LINES, log_tail[:match.start()])
            if header is not None:
                who = header.group("thread") or header.group("started") or header.group("process")
                kind = "process" if header.group("process") else "thread"
                script = _script(ending)
                sentence = sentence.replace(f"{script} raised", f"{script}'s {kind} {who!r} raised", 1)
                hint = (f"{hint} Only its {kind} died of it, and the script went on without it: what ended the "
                        f"job after that is not in the log.")
    return sentence, hint


def _applies(rule: Rule, ending: Ending) -> bool:
    if rule.phases and ending.phase not in rule.phases:
        return False
    if (rule.exit_codes or rule.signals) and ending.exit_code not in rule.exit_codes \
            and ending.signal not in rule.signals:
        return False
    return not rule.commands or ending.command in rule.commands


def _choose(ending: Ending, rules: tuple[Rule, ...], log_tail: str) -> tuple[Rule | None, re.Match | None]:
    """The rule that wins (see :func:`diagnose`) and its last match in the log (None for a rule without a pattern):
    a team's rule that holds, else a shipped one; within each, the latest match, then table order."""
    places = _Places(log_tail)
    # an exit after the job's Python error, with no progress after it, is the process crashing as it tears down
    teardown = ending.signal in _TEARDOWN_SIGNALS or ending.exit_code in _TEARDOWN_EXIT_CODES
    shipped = {id(rule) for rule in SHIPPED_RULES}
    team = tuple(rule for rule in rules if id(rule) not in shipped)
    if team and len(team) < len(rules):  # teams know their logs: a rule of theirs that holds beats every shipped one
        rule, match = _rank(ending, team, log_tail, places, teardown)
        if rule is not None:
            return rule, match
        rules = tuple(rule for rule in rules if id(rule) in shipped)
    return _rank(ending, rules, log_tail, places, teardown)


def _rank(ending: Ending, rules: tuple[Rule, ...], log_tail: str, places: "_Places",
          teardown: bool) -> tuple[Rule | None, re.Match | None]:
    """Of ``rules``, the one whose last match is latest in the log (see :func:`diagnose`), and that match."""
    best: tuple[int, int, Rule, re.Match | None] | None = None  # (place in the log, place in the table, rule, match)
    by_phase: tuple[int, Rule] | None = None  # the first rule without a pattern that names only phases
    since = 0  # a rule further down the table wins only with a match after the best's place: read from there
    for i, rule in enumerate(rules):
        if not _applies(rule, ending):
            continue
        match = None
        if rule.pattern is not None:
            match = _last_match(rule.pattern, log_tail, since)
            if match is None:
                continue
            place = places.of(match)
        elif rule.exit_codes or rule.signals:
            place = places.exit(teardown)
        elif rule.commands:
            place = places.end
        else:
            by_phase = by_phase or (i, rule)
            continue
        if best is None or place > best[0]:
            best = (place, i, rule, match)
            if place >= places.end:
                break  # a rule further down the table can at most tie, and a tie goes to the first
            since = places.after(place)
    if by_phase is not None and (best is None or by_phase[0] < best[1]):
        return by_phase[1], None
    return (best[2], best[3]) if best is not None else (None, None)


_TRACEBACK = "Traceback (most recent call last):"  # also ends a data-loader worker's "Original Traceback (…):"
_CHAINED = ("During handling of the above exception, another exception occurred:",
            "The above exception was the direct cause of the following exception:")
# a child process failed, and printed why before this: `accelerate launch` (one process) raises it for its script
_CHILD_FAILED = ("subprocess.CalledProcessError: ", "CalledProcessError: ")
# a line that shows the job went on training: a step or iteration it names (:data:`_STEP`), or a progress bar's
# "120/1000 [01:02<07:35"
_PROGRESS = re.compile(_STEP.pattern + r"|\d+/\d+ \[\d", re.I)
# a process that raised an uncaught exception and then crashed in its own native teardown (a NCCL communicator's or a
# CUDA context's destructor; the shell prints "Segmentation fault (core dumped)" or "Aborted"): SIGSEGV, SIGABRT
_TEARDOWN_SIGNALS = frozenset({signals.SIGSEGV.value, signals.SIGABRT.value})
_TEARDOWN_EXIT_CODES = frozenset(128 + s for s in _TEARDOWN_SIGNALS)


# What Python prints before the traceback of a thread other than the main one (threading.excepthook; _thread's
# "Unhandled exception in thread started by …") or of a multiprocessing.Process of the job's own, as it dies: the
# main thread goes on (or waits on it), and the process does not end of it
_BACKGROUND = re.compile(r"^(?:\[(?:default)?rank(?P<rank>\d+)\]: ?)?(?:Exception in thread (?P<thread>.+?)"
                         r"|Unhandled exception in thread started by (?P<started>.+?)|Process (?P<process>[\w.-]+)):?\s*$")
_BACKGROUND_LINES = re.compile(_BACKGROUND.pattern, re.M)
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::\s|:?$)")  # "ValueError: bad record 5", "StopIteration"


@dataclass(frozen=True)
class _Died:
    """A thread (or process) of the job's own that died of an exception: its name, rank, and exception line."""

    who: str
    rank: str | None
    said: str


def _background_deaths(log_tail: str) -> list[_Died]:
    """The threads (and processes of the job's own) that died of an exception in the log, in order (every rank's:
    a peer's thread, dead, may be what the others waited on)."""
    lines = log_tail.split("\n")
    deaths = []
    for n, line in enumerate(lines):
        header = _BACKGROUND.match(line.strip("\r"))
        if header is None or n + 1 >= len(lines):
            continue
        rank = header.group("rank")
        prefix = re.compile(rf"^\[(?:default)?rank{rank}\]: ?" if rank else r"^")
        body = [prefix.sub("", each) for each in lines[n + 1:n + 400]
                if not rank or prefix.match(each)]
        if not body or not body[0].strip().endswith(_TRACEBACK):
            continue
        said = _chain_end(body[1:])
        if said:
            who = header.group("thread") or header.group("started") or header.group("process")
            kind = "process" if header.group("process") else "thread"
            deaths.append(_Died(f"{kind} {who!r}" if kind == "process" or header.group("thread")
                                else f"thread started by {who}", rank, _clip(said, 160)))
    return deaths


_SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")
_FRAME = re.compile(r'^[ \t]*File "(?P<file>[^"\n]+)", line (?P<lineno>\d+)', re.M)
# a recursion's frame as Python prints it once, then the count of the times it left out
_REPEATED = re.compile(r'^[ \t]*File "(?P<file>[^"\n]+)", line (?P<lineno>\d+), in (?P<func>[^\n]+)\n'
                       r'(?:[ \t]+[^\n]*\n)*?[ \t]*\[Previous line repeated (?P<times>\d+) more times\]', re.M)


def _raised_where(log_tail: str, match: re.Match) -> dict[str, str]:
    """What the log says about the exception a rule matched, beyond its own line: ``where``, a SyntaxError's file and
    line (" (train.py, line 3)": its message rarely names them, and it has no frame of the code that ran), or the
    call a RecursionError repeated (its message names none, and its traceback is a thousand frames); ``cause``,
    the first exception of a chain it ends (" (caused by KeyError: 'shard_7')", " (while handling …)"): the
    exception Python printed last is often a wrapper's, and the one that started it says what went wrong."""
    out, at = {}, match.start("exception")
    if match.group("exception").rsplit(".", 1)[-1] in _SYNTAX_ERRORS:
        before = log_tail[:at].split("\n")[-6:]
        frame = _last_match(_FRAME, "\n".join(before))
        if frame is not None:
            out["where"] = f" ({frame.group('file')}, line {frame.group('lineno')})"
    elif match.group("exception") == "RecursionError":
        before = log_tail[:at].split("\n")[-12:]
        repeated = _last_match(_REPEATED, "\n".join(before))
        if repeated is not None:
            out["where"] = (f" (the call at {repeated.group('file')}, line {repeated.group('lineno')}, in "
                            f"{repeated.group('func')}, repeated {repeated.group('times')} more times)")
    places = _Places(log_tail)
    line = bisect.bisect_right(places.starts, at) - 1
    first = places.places[line]
    if first < line:
        first_exc, last_exc, link = _chain_parts(log_tail.split("\n")[first:line + 1])
        # not when the last repeats the first's message ("OSError: s3://b/x: An error occurred (NoSuchBucket) …"
        # caused by "botocore.errorfactory.NoSuchBucket: An error occurred (NoSuchBucket) …"): said twice, it told
        # nothing more
        said = first_exc.split(": ", 1)[1].strip() if ": " in first_exc else ""
        if link and first_exc != last_exc and not (said and said in last_exc):
            out["cause"] = f" ({link} {_clip(first_exc, 160)})"
    return out


def _chain_end(body: list[str]) -> str:
    """The exception a traceback's ``body`` (the lines after its first "Traceback" line) ends in: its first exception
    line, or where Python printed a chain (oldest first, each exception line followed by "During handling of the above
    exception" or "The above exception was the direct cause"), the last one's, naming the first as what it happened
    while handling or was caused by. Another process's lines may come between (one pipe, no prefix)."""
    first, last, link = _chain_parts(body)
    return first if last == first else f"{last} ({link} {first})"


def _chain_parts(body: list[str]) -> tuple[str, str, str]:
    """A traceback's first and last exception lines, and how the last was chained to the first ("caused by", "while
    handling"; empty when it is one exception): see :func:`_chain_end`."""
    first = last = link = ""
    chained = False  # the line before (blank lines aside) was an exception line: a chain's marker may follow
    for each in body:
        line = each.strip()
        if not line:
            continue
        if chained:
            if line not in _CHAINED:
                break
            link, chained = ("caused by" if line.startswith("The above") else "while handling"), False
        elif _EXCEPTION_LINE.match(each):  # never a chain's marker, which has no colon after its first word
            first, last, chained = first or line, line, True
    return first, last, link


class _Places:
    """Where a match is in the log, as a number that grows down it: the number of its line, except that the lines of
    one Python traceback (its frames and exception line, and what is chained to it: the tracebacks after "During
    handling of the above exception" or "The above exception was the direct cause", a data-loader worker's "Original
    Traceback" printed in its wrapper's message) share the number of its first line, as one failure; and a traceback
    that ends in a ``CalledProcessError`` (the script's own ``check=True``; a launcher's that follows its child's
    traceback is not read at all, see :func:`_without_launcher_traceback`) takes the number of the line before it:
    it reports the failure its child printed there."""

    def __init__(self, text: str):
        self.starts: list[int] = []  # where each line begins
        self.places: list[int] = []
        self.end = 0  # the place of the last line that is not blank
        self.failure: int | None = None  # the place of the last traceback that reached its exception line
        # the places of tracebacks a thread other than the main one printed (:data:`_BACKGROUND`), as it died: not
        # how the process ended (``failure`` is never one), the main thread went on without it
        self.background: set[int] = set()
        self.went_on = False  # whether a line after that exception line shows progress (the job caught it)
        first, block = -1, 0  # the first line of the last traceback (or chain of them), and its place
        seen = -1  # the last line that is not blank
        before = -1  # the last line that is not blank before that traceback
        state = ""  # "frames": a traceback's, before its exception line; "chained": after "During handling …"
        offset = 0
        text_lines = text.split("\n")
        for n, line in enumerate(text_lines):
            self.starts.append(offset)
            offset += len(line) + 1
            bare = line.strip()
            inside = True
            if bare.endswith(_TRACEBACK):
                if first >= 0 and (state == "chained" or (bare.startswith("Original") and self.places[n - 1] == block)):
                    self.places[first:] = [block] * (n - first)  # what its message printed before is the same failure
                else:
                    first, block, before = n, n, seen
                    if seen >= 0 and _BACKGROUND.match(text_lines[seen]):
                        self.background.add(block)
                state = "frames"
            elif bare in _CHAINED and first >= 0:
                self.places[first:] = [block] * (n - first)
                state = "chained"
            elif state == "frames":
                if bare and not line[:1].isspace():  # frames are indented, the exception line is not
                    state = ""
                    if bare.startswith(_CHILD_FAILED) and before >= 0:
                        first, block = before + 1, self.places[before]
                        self.places[first:] = [block] * (n - first)
                    if block not in self.background:
                        self.failure, self.went_on = block, False
            elif not (state == "chained" and not bare):
                state, inside = "", False
                if self.failure is not None and not self.went_on and _PROGRESS.search(line):
                    self.went_on = True
            self.places.append(block if inside and first >= 0 else n)
            if bare:
                self.end, seen = self.places[-1], n

    def exit(self, teardown: bool) -> int:
        """The place of how the process ended (a rule on its exit code or signal): the log's last line; but with
        ``teardown`` (it crashed, SIGSEGV or SIGABRT) after a traceback it did not get past, that traceback's."""
        return self.failure if teardown and self.failure is not None and not self.went_on else self.end

    def after(self, place: int) -> int:
        """Where the first line placed after ``place`` begins."""
        n = bisect.bisect_right(self.places, place)
        return self.starts[n] if n < len(self.starts) else self.starts[-1] + 1

    def of(self, match: re.Match) -> int:
        """The place of a match's last character that is not blank (``Killed\\s*$`` takes the newline after it)."""
        at = match.end() - 1
        while at > match.start() and match.string[at].isspace():
            at -= 1
        return self.places[bisect.bisect_right(self.starts, max(at, match.start())) - 1]


# A process in a torch.distributed group prints its uncaught traceback with each line prefixed
# "[rankN]:"; torchrun then raises a ChildFailedError of its own, whose summary names the first rank
# that failed ("Root Cause (first observed failure)"), and the other ranks die of the lost peer
# ("Connection closed by peer … a remote worker crashing").
_RANK_LINE = re.compile(r"^\[(?:default)?rank(\d+)\]: ?(.*)$")
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):.*?^\s*rank\s*:\s*(\d+)", re.S | re.M)
_LAUNCHER_ERROR = re.compile(r"^torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError:.*$", re.M)
_LOST_PEER = re.compile(r"Connection (?:closed|reset) by peer|remote worker crashing")
# torchrun's summary lists the other ranks it saw fail ("Failures:") before the root cause: those it stopped itself
# once the root cause had failed, a SIGKILL among them ("Unable to shutdown process … forcefully exiting via
# Signals.SIGKILL") when one did not stop on its SIGTERM
# a failure of a rank's own: a traceback, an exception (Python's line, C++'s "terminate called after throwing"), an
# error of torch's C++ log ("[E ProcessGroupNCCL.cpp:616] … Watchdog caught collective operation timeout"); not a
# warning ("[rank2]:[W socket.cpp:697] … errno: 99", which torch prints at start-up)
_OWN_FAILURE = re.compile(r"^(?:Traceback \(most recent call last\):|[A-Za-z_][\w.]*(?:Error|Exception)(?::|$)"
                          r"|terminate called after throwing|\[E[\d ])", re.M)
_OTHER_FAILURES = re.compile(r"^Failures:\n.*?^(?=-+\nRoot Cause \(first observed failure\):)", re.S | re.M)


def _root_cause(log_tail: str) -> str:
    """The log as the rules read it: torchrun's own ChildFailedError dropped, and of the workers' lines
    (unprefixed) only those of one rank, so a peer that died of it does not hide the cause: the first
    that printed a failure of its own (:data:`_OWN_FAILURE`, not a lost peer; the one torchrun names
    first of all), else the one torchrun names. When that rank printed a failure of its
    own, the other ranks' entries in torchrun's summary are dropped too (they were stopped after it);
    when it did not (it lost a peer, or printed only warnings such as the start-up "[W socket.cpp:697]
    … errno: 99"), they stay: a peer SIGKILLed is the cause."""
    if "rank" not in log_tail and "ChildFailedError" not in log_tail:
        return log_tail
    by_rank: dict[str, list[str]] = {}
    for line in log_tail.splitlines():
        if (m := _RANK_LINE.match(line)) is not None:
            by_rank.setdefault(m.group(1), []).append(m.group(2))
    root = _last_match(_ROOT_CAUSE, log_tail)
    order = sorted(by_rank, key=lambda r: (root is None or r != root.group(1), int(r)))
    failed = [r for r in order if _OWN_FAILURE.search(said := _without_background("\n".join(by_rank[r])))
              and not _LOST_PEER.search(said)]
    # a rank whose collective timed out waited on another: a rank that failed of its own otherwise is the cause
    # (torchrun names the rank it saw fail first on its node: on a node of its own, the one that waited)
    waited = {r for r in failed if _HANG.search("\n".join(by_rank[r]))}
    wanted = ([r for r in failed if r not in waited] or failed or order or [None])[0]
    lines = []
    for line in log_tail.splitlines():
        if (m := _RANK_LINE.match(line)) is not None:
            if m.group(1) != wanted:
                continue
            line = m.group(2)
        lines.append(line)
    text = _LAUNCHER_ERROR.sub("", "\n".join(lines))
    return _OTHER_FAILURES.sub("", text) if failed else text


def _without_background(text: str) -> str:
    """``text`` without the tracebacks of threads that died (:data:`_BACKGROUND`): a thread's death is not how its
    process failed."""
    places = _Places(text)
    if not places.background:
        return text
    lines = text.split("\n")
    return "\n".join(line for line, place in zip(lines, places.places)
                     if place not in places.background and not _BACKGROUND.match(line))


# `accelerate launch` (one process) runs the script as its child and, when it exits non-zero, raises this of its own
_LAUNCHER_TRACEBACK = re.compile(r"^Traceback \(most recent call last\):\n(?:[ \t][^\n]*\n)*(?:subprocess\.)?"
                                 r"CalledProcessError: [^\n]* returned non-zero exit status [^\n]*(?:\n|\Z)", re.M)


def _without_launcher_traceback(log_tail: str) -> str:
    """The log without a launcher's own traceback that ends in a ``CalledProcessError`` ("Command '[…, 'train.py']'
    returned non-zero exit status 1") when a traceback comes before it: the one its child printed, the cause it
    reports, however much was printed between them (wandb's exit summary, the resource tracker's "leaked semaphore"
    warning), as torchrun's ChildFailedError is not read either. Without a traceback before it (the script's own
    ``check=True``), and when it says its child "died with <Signals.SIGKILL: 9>" (which the child could not print),
    it stays, read as the line before it (:class:`_Places`)."""
    if "CalledProcessError: " not in log_tail:
        return log_tail
    kept, at = [], 0
    for match in _LAUNCHER_TRACEBACK.finditer(log_tail):
        earlier = log_tail[:match.start()]
        if _TRACEBACK not in earlier or earlier.rstrip().endswith(_CHAINED):
            continue  # nothing printed a traceback before it; or it is chained to one: part of that failure
        kept.append(log_tail[at:match.start()])
        at = match.end()
    return "".join(kept) + log_tail[at:] if kept else log_tail


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_SKYPILOT_PREFIX = re.compile(r"^\((?:task|head|worker\d*)(?:, [a-z_]+=[^,)\s]+)*\) ?", re.M)
# kept: the local launcher's word that the attempt was not run at all ("[spot-broker] workdir /x: not run: …"), which
# the rules read (nothing of the job ran, so nothing else is in its log)
_BROKER_LINE = re.compile(r"^\[spot-broker\] (?![^\n]*\bnot run: )[^\n]*\n?", re.M)


def _readable(log_tail: str) -> str:
    """The log as the job wrote it: colour codes stripped (``\\x1b[1;91mValueError:``), SkyPilot's line prefix
    (``(task, pid=2101) ``, ``(worker1, rank=1, pid=…, ip=…) ``) dropped, and the broker's own lines
    (``[spot-broker] run exited with status 3``, the wrapper's last word on SkyPilot) left out, so that
    neither hides the job's exception nor is quoted as the job's last line; but for the local launcher's
    "[spot-broker] …not run: …", said when nothing of the job ran (:data:`_BROKER_LINE`)."""
    return _BROKER_LINE.sub("", _SKYPILOT_PREFIX.sub("", _ANSI.sub("", log_tail)))


_SHUTDOWN_NOISE = ("Exception ignored in", "Error in atexit._run_exitfuncs:")


_AT_EXIT_SAVE = re.compile(r"^.*checkpoint upload failed at exit: .*\n?", re.M)
"""The checkpoint library's line when its last save, as the process exits, could not be uploaded
(``checkpoint/checkpointer.py``): it comes after whatever ended the job, and never changes how it ended."""


def _after_shutdown_noise(log_tail: str) -> str:
    """The log without the tracebacks Python prints while shutting down after the real one ("Exception ignored
    in: <function _MultiProcessingDataLoaderIter.__del__ …>" … ``AssertionError: can only test a child
    process``; an atexit callback's, "Exception ignored in atexit callback" or before Python 3.11 "Error in
    atexit._run_exitfuncs:"), nor the checkpoint library's at-exit save that failed (:data:`_AT_EXIT_SAVE`): the
    error that ended the job is the one before them."""
    if "failed at exit: " in log_tail:
        log_tail = _AT_EXIT_SAVE.sub("", log_tail)
    if "Exception ignored in" not in log_tail and "Error in atexit." not in log_tail:
        return log_tail
    kept, skipping = [], False
    for line in log_tail.splitlines():
        if line.startswith(_SHUTDOWN_NOISE):
            skipping = True
            continue
        if skipping:
            if line[:1].isspace() or line.startswith("Traceback (most recent call last)") or not line.strip():
                continue
            skipping = False  # the ignored exception's own line ends its block
            continue
        kept.append(line)
    return "\n".join(kept)


def _whole_path(match: re.Match) -> str:
    """The path a rule matched, with what the pattern's leading ``/`` cut off a relative one put back
    (``'data/openwebtext/train.bin'`` was read as ``/openwebtext/train.bin``)."""
    text, start = match.string, match.start("path")
    while start > 0 and text[start - 1] not in " \t\n'\"`=(:[":
        start -= 1
    return text[start:match.end("path")].rstrip(".,;")


def _quoted_path(said: str) -> str:
    """The path an OSError's message ends with (``[Errno 27] File too large: '/ckpt/run/step-…/00-w.safetensors'``),
    or "" when it names none."""
    named = re.search(r": '(/[^'\n]+)'\s*$", said)
    return named.group(1) if named else ""


def _duration(ms: int) -> str:
    """600000 → "10 minutes", 90000 → "90 seconds", 1 → "1 ms"."""
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms // 1000
    if seconds % 60 or seconds < 120:
        return f"{seconds} second{'s' if seconds > 1 else ''}"
    return f"{seconds // 60} minutes"


# a collective that timed out: NCCL's watchdog, NCCL_BLOCKING_WAIT's (torch 1.x "Caught collective operation
# timeout", 2.x "… timed out in blocking wait"), gloo's
_HANG = re.compile(r"collective operation timeout|timed out in blocking wait"
                   r"|Timed out waiting \d+ms for (?:recv|send) operation", re.I)


def _without_hang_fallout(log_tail: str) -> str:
    """The log up to its first collective timeout when the job's own failure comes before it (a traceback the job did
    not get past): the process that failed never joined the next collective, and the others waited on it until their
    timeout, which is that failure's consequence (in one log from several nodes, or from ranks without torchrun's
    "[rankN]:" prefix). A timeout with no such failure before it stays, and is read as what ended the job: a process
    that hung (its node, GPU or link) or fell behind; a failure printed after it is then the latest, as ever: a
    process that was still running, not one that hung."""
    first = _HANG.search(log_tail)
    if first is None:
        return log_tail
    before = log_tail[:log_tail.rfind("\n", 0, first.start()) + 1]
    places = _Places(before)
    return before if places.failure is not None and not places.went_on else log_tail


def _ended(ending: Ending) -> str:
    if ending.signal:
        try:
            name = signals.Signals(ending.signal).name
        except ValueError:
            name = "unknown"
        return f"was killed by signal {ending.signal} ({name})"
    return "failed" if ending.exit_code is None else f"exited with code {ending.exit_code}"


# pip's (urllib3's) noise in a network failure's line: an object's repr ("<pip._vendor.urllib3.connection.
# HTTPSConnection object at 0x7f64a1b2c3d0>") and its Retry's arguments, which filled the quote before what failed
_NET_OBJECT = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")
_NET_RETRY = re.compile(r"\b(Retry\(total=\d+), [^()]*\)")
# what failed, in such a line: the part a quote keeps
_NET_CAUSE = re.compile(r"Failed to (?:establish a new connection|resolve)[^'\"\n]*|\[Errno -?\d+\][^'\"\n]*"
                        r"|Connection (?:refused|reset by peer)|Name or service not known|Temporary failure in name "
                        r"resolution|(?:Read|Connection to \S+) timed out[^'\"\n]*")


def _said_net(line: str, size: int = 200) -> str:
    """A network failure's line, for a quote: without pip's noise (:data:`_NET_OBJECT`, :data:`_NET_RETRY`, marked
    "…"), and cut in the middle, not the end, where the end says what failed: pip's "WARNING: Retrying (Retry(total=4,
    connect=None, …" was cut at its object's address, before "Connection refused"."""
    text = _NET_RETRY.sub(r"\1, …)", _NET_OBJECT.sub("<…>", line.strip()))
    cause = _last_match(_NET_CAUSE, text)
    if len(text) <= size or cause is None or cause.end() < size:
        return _clip(text, size)
    tail = _clip(text[cause.start():], size // 2)
    return text[:size - len(tail) - 3].rstrip() + " … " + tail


def _last_line(log_tail: str) -> str:
    """The log's last non-blank line (a progress bar's last redraw), clipped: often the job's own last word."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", log_tail) if line.strip()]
    return _clip(lines[-1]) if lines else ""


def _clip(text: str, size: int = 200) -> str:
    text = text.strip()
    return text if len(text) <= size else text[:size - 1] + "…"


def _clip_message(text: str, size: int = 200) -> str:
    """An exception's message, clipped as :func:`_clip` does, but keeping its closing note in parentheses (the
    checkpoint library's "(a file is over the size limit: …)", which says what the error means) and cut where a word
    ends, not inside the path before it."""
    text = text.strip()
    note = re.search(r" \([^()\n]{1,200}\)\.?$", text)
    if len(text) <= size or note is None:
        return _clip(text, size)
    head, budget = text[:note.start()], max(size - len(note.group()), 80)
    if len(head) > budget:
        cut = head.rfind(" ", 0, budget)
        head = head[:cut if cut > budget // 2 else budget].rstrip(" :,;") + " …"
    return head + note.group()


def _last_match(pattern: re.Pattern, text: str, since: int = 0) -> re.Match | None:
    last = None
    for last in pattern.finditer(text, since):
        pass
    return last


def _fill(template: str, facts: dict[str, Any]) -> str:
    class Missing(dict):
        def __missing__(self, key):
            return "?"

    return template.format_map(Missing({k: ("" if v is None else v) for k, v in facts.items()}))


RULE_KEYS = frozenset({"class", "pattern", "phases", "exit_codes", "sentence", "hint", "infrastructure"})
# the phases a rule's ``phases`` may name: every final phase a launcher reports but ``succeeded`` (:func:`diagnose`
# says a succeeded attempt succeeded whatever its log says, before any rule), then the engine's own names for a stop
# it asked for (``broker/engine/reconcile.py::_ended``)
ENDING_PHASES = tuple(p.value for p in Phase if p.is_final and p is not Phase.SUCCEEDED) + (
    "budget", "cancelled", "silent", "silent_again")
# the facts :func:`diagnose` may give as a number (a step, an exit code, a signal, a batch size), else "" when not
# known: a format spec of a sentence's field that names one must suit both
_NUMBER_FACTS = frozenset({"step", "code", "signal", "batch_size", "total_steps"})


def _fillable(template: str) -> str | None:
    """Why a rule's sentence or hint cannot be filled as :func:`_fill` fills it, or None when it can. A field is a
    plain name (``{step}``; one no diagnosis gives fills as "?", as :func:`_fill` does), with at most a conversion
    (``!r``) and a format spec that suits every value that fact may take; a brace of the text's own is doubled. One
    that could not be filled raised in the engine at every tick for every job whose log the rule matched, and the job
    stayed where it was."""
    import string

    try:
        fields = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"{exc} (a fact is written {{step}}; a brace of the text's own is doubled: {{{{ or }}}})"
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if not name or name.isdigit():
            return (f"{{{name}}} is not a fact's name (a fact is written by name, {{step}}; a brace of the text's own "
                    "is doubled: {{ or }})")
        if not name.isidentifier():
            return f"{{{name}}}: a fact is written by its name alone ({{step}}), with no attribute or index"
        if conversion not in (None, "r", "s", "a"):
            return f"{{{name}!{conversion}}}: a conversion is !r, !s or !a"
        if spec:
            if "{" in spec or "}" in spec:
                return f"{{{name}:{spec}}}: a format spec is written out, with no field inside it"
            try:
                format("", spec)
                if name in _NUMBER_FACTS:
                    format(1, spec)
            except (ValueError, TypeError) as exc:
                return f"{{{name}:{spec}}}: the format spec does not suit the fact ({exc})"
    return None


def _list_of(value: Any, kind: type, what: str) -> str | None:
    """Why a rule's list setting is not a list of ``kind``, or None when it is: a string read as a set of its
    characters, and a number made the rule raise."""
    if not isinstance(value, list):
        return f"must be a list of {what}, not {value!r} (write [{value}])" if isinstance(value, (str, int)) \
            else f"must be a list of {what}, not {value!r}"
    for item in value:
        if not isinstance(item, kind) or isinstance(item, bool):
            return f"must be a list of {what}: {item!r} is not one"
    return None


def rules_from_yaml(text: str, *, where: str = "failure_rules") -> tuple[Rule, ...]:
    """Team rules: a list of ``{class, pattern?, phases?, exit_codes?, sentence, hint?, infrastructure?}``."""
    try:
        raw = yaml.safe_load(text) or []
    except yaml.YAMLError as exc:  # in one line, naming the file's line and column, not "<unicode string>"
        from broker.task_text import yaml_error  # (it imports broker.spec, as this module does)

        raise ValueError(f"{where}: {yaml_error(exc)}") from None
    if isinstance(raw, dict):
        raw = raw.get("rules", [])
    if not isinstance(raw, list):
        raise ValueError(f"{where}: must be a list of rules")
    out = []
    for i, r in enumerate(raw):
        if not isinstance(r, dict) or not r.get("class") or not r.get("sentence"):
            raise ValueError(f"{where}[{i}]: needs 'class' and 'sentence'")
        unknown = sorted(set(map(str, r)) - RULE_KEYS)
        if unknown:
            raise ValueError(f"{where}[{i}].{unknown[0]}: is not a rule setting ({unknown_key_hint(unknown[0], RULE_KEYS)})")
        infrastructure = r.get("infrastructure")
        if infrastructure is not None and not isinstance(infrastructure, bool):
            raise ValueError(f"{where}[{i}].infrastructure: must be true or false")
        sentence, hint = str(r["sentence"]), "" if r.get("hint") is None else str(r["hint"])
        for key, text in (("sentence", sentence), ("hint", hint)):
            if (why := _fillable(text)) is not None:
                raise ValueError(f"{where}[{i}].{key}: {why}")
        pattern = r.get("pattern")
        if pattern is not None and not isinstance(pattern, str):
            raise ValueError(f"{where}[{i}].pattern: must be a regular expression (text), not {pattern!r}: quote it "
                             f"('{pattern}')")
        phases, codes = r.get("phases"), r.get("exit_codes")
        if phases is not None:
            if (why := _list_of(phases, str, "phases")) is not None:
                raise ValueError(f"{where}[{i}].phases: {why}")
            if Phase.SUCCEEDED.value in phases:
                raise ValueError(f"{where}[{i}].phases: 'succeeded' is never diagnosed by a rule (an attempt whose "
                                 f"command exited 0 succeeded, whatever its log says)")
            if unknown := [p for p in phases if p not in ENDING_PHASES]:
                raise ValueError(f"{where}[{i}].phases: {unknown[0]!r} is not a phase an attempt ends in (one of "
                                 f"{', '.join(ENDING_PHASES)})")
        if codes is not None and (why := _list_of(codes, int, "exit codes (integers)")) is not None:
            raise ValueError(f"{where}[{i}].exit_codes: {why}")
        try:
            rule = _r(str(r["class"]), sentence, hint, pattern, phases or (), codes or ())
        except re.error as exc:
            raise ValueError(f"{where}[{i}].pattern: {exc}") from None
        out.append(replace(rule, infrastructure=infrastructure))
    return tuple(out)


class RuleBook:
    """Team rules from a file, re-read when it changes (no restart), before the shipped rules. The config's
    ``failure_rules`` is checked at start (:func:`broker.config._failure_rules`: a file missing or invalid stops it);
    an edit made since that cannot be used, or the file removed, is logged (a WARNING of ``broker.diagnosis``) once
    when it is seen, and ``error`` says why: it was kept in ``error``, which nothing read."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path).expanduser() if path else None
        self._mtime: float | None = None
        self._rules: tuple[Rule, ...] = SHIPPED_RULES
        self.error: str | None = None
        self._raised_at: float | None = None  # the file's mtime when its rules last raised in diagnose (said once)

    def rules(self) -> tuple[Rule, ...]:
        if self.path is None:
            return SHIPPED_RULES
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            if self._mtime is not None and self.error != "missing":
                self.error = "missing"
                self._say(f"failure_rules: {self.path} is gone: diagnosing with the shipped rules alone until it is "
                          "back")
            self._mtime = None
            return SHIPPED_RULES
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._rules = rules_from_yaml(self.path.read_text(), where=str(self.path)) + SHIPPED_RULES
                self.error = None
            except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
                self.error = str(exc)  # keep the last good rules
                self._say(f"failure_rules: {self.path} cannot be used, the rules read before are kept: {exc}")
        return self._rules

    @staticmethod
    def _say(warning: str) -> None:
        import logging

        logging.getLogger("broker.diagnosis").warning("%s", warning)

    def diagnose(self, ending: Ending) -> Diagnosis:
        """The ending diagnosed with the team's rules before the shipped ones. Should they raise (a rule the load's
        checks let through), the shipped rules alone diagnose it, and that is logged once until the file changes: a
        diagnosis that raised left the job where it was (``launching``, ``cancelling``), at every tick."""
        rules = self.rules()
        try:
            return diagnose(ending, rules)
        except Exception as exc:
            if rules is SHIPPED_RULES:
                raise
            if self._raised_at != self._mtime:
                self._raised_at = self._mtime
                self._say(f"failure_rules: {self.path}: a rule raised diagnosing how an attempt ended "
                          f"({type(exc).__name__}: {exc}): the shipped rules diagnose it instead, until the file "
                          "changes (said once)")
            return diagnose(ending, SHIPPED_RULES)
