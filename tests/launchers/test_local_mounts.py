"""The local launcher's file_mounts on this host: a link at the destination to the attempt's own copy, made for the
run and removed after it. Jobs on one host share its paths, so a destination another running attempt has its copy
mounted at is not taken over: that run fails at once, saying why, instead of reading the other job's files."""

from __future__ import annotations

import json
import os

from launchers.local_runner import MountTaken, Runner, link_mounts, unlink_mounts

import pytest


def copy_of(root, attempt: str, text: str, n: int = 0):
    """An attempt's unpacked copy, laid out as broker/workdir_store.py lays it out."""
    folder = root / "workdirs" / "mounts" / attempt / str(n)
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text(text)
    return str(folder)


def test_a_destination_another_attempt_has_mounted_is_refused_and_free_again_once_that_one_ends(tmp_path):
    dest = str(tmp_path / "data" / "tokenizer")
    first, second = copy_of(tmp_path, "j-1-a1", "one"), copy_of(tmp_path, "j-2-a1", "two")
    made, _ = link_mounts({"file_mounts": {dest: first}})
    with pytest.raises(MountTaken, match="another job on this host"):
        link_mounts({"file_mounts": {str(tmp_path / "mine"): second, dest: second}})
    assert not os.path.lexists(tmp_path / "mine")  # what it had linked before the refusal is undone
    assert open(os.path.join(dest, "vocab.txt")).read() == "one"  # the first job's mount untouched
    unlink_mounts(made)
    again, _ = link_mounts({"file_mounts": {dest: second}})
    assert open(os.path.join(dest, "vocab.txt")).read() == "two"
    unlink_mounts(again)
    assert not os.path.lexists(dest)


def test_a_link_left_by_an_ended_attempt_whose_copy_is_gone_is_replaced(tmp_path):
    dest = tmp_path / "data"
    gone = tmp_path / "workdirs" / "mounts" / "j-1-a1" / "0"
    os.symlink(gone, dest)  # its runner was killed before it unlinked, and its copy was removed
    made, _ = link_mounts({"file_mounts": {str(dest): copy_of(tmp_path, "j-1-a2", "new")}})
    assert (dest / "vocab.txt").read_text() == "new"
    unlink_mounts(made)


def test_a_run_whose_mount_is_taken_fails_before_its_setup_and_says_why(tmp_path):
    dest = str(tmp_path / "data")
    held, _ = link_mounts({"file_mounts": {dest: copy_of(tmp_path, "j-1-a1", "one")}})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    marker = tmp_path / "ran"
    task = {"setup": f"touch {marker}", "run": f"touch {marker}", "file_mounts": {dest: copy_of(tmp_path, "j-2-a1", "two")}}
    (run_dir / "request.json").write_text(json.dumps({"attempt_id": "j-2-a1", "task": task, "placement": {}}))
    result = Runner(run_dir).run()
    assert (result["exit_code"], result["step"]) == (1, "setup") and not marker.exists()
    assert "another job on this host has its own copy mounted there" in (run_dir / "output.log").read_text()
    unlink_mounts(held)


def test_a_destination_under_another_attempts_mounted_copy_is_refused_and_its_copy_left_untouched(tmp_path):
    """Job 1 mounts /data, job 2 /data/tok: job 2's link would be made inside job 1's copy (and gone with it when
    job 1 ends, under job 2's run)."""
    data = tmp_path / "data"
    held, _ = link_mounts({"file_mounts": {str(data): copy_of(tmp_path, "j-1-a1", "one")}})
    tok = copy_of(tmp_path, "j-2-a1", "two")
    with pytest.raises(MountTaken, match="under another job's copy mounted on this host"):
        link_mounts({"file_mounts": {str(data / "tok"): tok}})
    assert sorted(os.listdir(data)) == ["vocab.txt"]  # nothing of job 2 in job 1's copy
    with pytest.raises(MountTaken, match="under another job's copy"):  # nor job 1's file read as job 2's mount
        link_mounts({"file_mounts": {str(data / "vocab.txt"): tok}})
    unlink_mounts(held)


def test_a_job_may_mount_one_of_its_own_uploads_under_another(tmp_path):
    data = tmp_path / "data"
    made, _ = link_mounts({"file_mounts": {str(data): copy_of(tmp_path, "j-1-a1", "one"),
                                           str(data / "tok"): copy_of(tmp_path, "j-1-a1", "two", 1)}})
    assert (data / "tok" / "vocab.txt").read_text() == "two"
    unlink_mounts(made)


def test_the_folders_made_for_a_link_go_with_it_so_a_later_job_can_mount_their_parent(tmp_path):
    """/data/tok made /data; left behind, a later job mounting /data found it "exists, left as it is" and ran
    without its files."""
    made, _ = link_mounts({"file_mounts": {str(tmp_path / "data" / "deep" / "tok"): copy_of(tmp_path, "j-1-a1", "a"),
                                           str(tmp_path / "data" / "cfg"): copy_of(tmp_path, "j-1-a1b", "c")}})
    assert (tmp_path / "data" / "deep" / "tok" / "vocab.txt").read_text() == "a"
    unlink_mounts(made)
    assert not (tmp_path / "data").exists()
    later, notes = link_mounts({"file_mounts": {str(tmp_path / "data"): copy_of(tmp_path, "j-2-a1", "b")}})
    assert (tmp_path / "data" / "vocab.txt").read_text() == "b", notes
    unlink_mounts(later)


def test_a_folder_made_for_a_link_that_holds_something_else_by_then_is_kept(tmp_path):
    made, _ = link_mounts({"file_mounts": {str(tmp_path / "data" / "tok"): copy_of(tmp_path, "j-1-a1", "a")}})
    (tmp_path / "data" / "written-meanwhile.txt").write_text("keep me")
    unlink_mounts(made)
    assert (tmp_path / "data" / "written-meanwhile.txt").read_text() == "keep me"
    assert not os.path.lexists(tmp_path / "data" / "tok")
