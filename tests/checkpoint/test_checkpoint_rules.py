"""Pure decisions of the checkpoint library: layout, retention, schedule, manifest checks."""

from __future__ import annotations

import pytest

from checkpoint import layout
from checkpoint.layout import CheckpointId, Entry
from checkpoint.manifest import FileEntry, Manifest, check_files, check_marker, commit_marker
from checkpoint.retention import RetentionPolicy, to_delete
from checkpoint.schedule import SavePolicy, is_due


def entries(*specs: tuple[int, bool]) -> list[Entry]:
    return [Entry(CheckpointId(step, 1000 + i), committed, frozenset()) for i, (step, committed) in enumerate(specs)]


def steps(es: list[Entry]) -> list[tuple[int, bool]]:
    return [(e.id.step, e.committed) for e in es]


# -- layout ----------------------------------------------------------------------------


def test_directory_names_sort_in_step_order_and_round_trip():
    ids = [CheckpointId(10, 5), CheckpointId(9, 7), CheckpointId(10, 2), CheckpointId(1200, 1)]
    names = sorted(i.name for i in ids)
    assert [layout.parse_name(n) for n in names] == sorted(ids)


@pytest.mark.parametrize("name", ["step-12-1", "step-000000000012", "tmp", "step-000000000012-17330112001x"],
                         ids=["short fields are not ours", "no creation time", "a stray name",
                              "a non-digit time"])
def test_foreign_names_are_not_checkpoints(name):
    assert layout.parse_name(name) is None


def test_a_second_save_in_the_same_millisecond_still_gets_a_new_directory():
    first = layout.new_id(5, 1000, None)
    assert layout.new_id(6, 1000, first) == CheckpointId(6, 1001)


def test_scan_groups_files_and_marks_only_dirs_with_the_marker_committed():
    a, b = CheckpointId(1, 1), CheckpointId(2, 2)
    paths = [f"{a.name}/state.json", f"{a.name}/COMMITTED", f"{b.name}/state.json",
             "unrelated.txt", f"{b.name}/nested/x"]
    scanned = layout.scan(paths)
    assert [(e.id, e.committed) for e in scanned] == [(a, True), (b, False)]
    assert scanned[0].files == {"state.json", "COMMITTED"}


def test_checkpoint_uri_splits_into_base_and_id():
    assert layout.split_checkpoint_uri("s3://b/run/step-000000000042-0000000000007/") == (
        "s3://b/run", CheckpointId(42, 7))
    with pytest.raises(ValueError):
        layout.split_checkpoint_uri("s3://b/run")


def test_tensor_file_names_are_safe_and_unique_per_key():
    assert layout.tensor_file(0, "model") == "00-model.safetensors"
    assert layout.tensor_file(3, "../../etc/passwd") == "03-etc_passwd.safetensors"


# -- retention -------------------------------------------------------------------------

RETENTION_CASES = [
    ("five committed, keep 3 → the two oldest go",
     [(1, True), (2, True), (3, True), (4, True), (5, True)], RetentionPolicy(3), [(1, True), (2, True)]),
    ("only two committed, keep 3 → nothing goes",
     [(1, True), (2, True)], RetentionPolicy(3), []),
    ("an uncommitted dir older than the newest commit is debris → it goes",
     [(1, True), (2, False), (3, True)], RetentionPolicy(3), [(2, False)]),
    ("an uncommitted dir newer than the newest commit may be in flight → it stays",
     [(1, True), (2, True), (3, False)], RetentionPolicy(1), [(1, True)]),
    ("nothing committed yet → nothing is deleted, not even debris",
     [(1, False), (2, False)], RetentionPolicy(1), []),
    ("keep every 100 steps keeps the first of each window as well as the last 2",
     [(50, True), (100, True), (150, True), (210, True), (260, True), (300, True), (350, True)],
     RetentionPolicy(2, keep_every=100), [(150, True), (260, True)]),
]


@pytest.mark.parametrize("existing, policy, deleted", [c[1:] for c in RETENTION_CASES],
                         ids=[c[0] for c in RETENTION_CASES])
def test_retention(existing, policy, deleted):
    assert steps(to_delete(entries(*existing), policy)) == deleted


def test_a_run_rolled_back_keeps_its_own_checkpoints_and_leaves_the_abandoned_ones_alone():
    """Rolled back to step 20 past three committed later steps: counted, they would be the "newest 3" and
    each new checkpoint of the run (25, 26) would be deleted right after its commit."""
    existing = entries((10, True), (20, True), (50, True), (60, True), (70, True), (25, True), (26, True))
    abandoned = frozenset(e.id for e in existing if e.id.step >= 50)
    assert steps(to_delete(existing, RetentionPolicy(2), abandoned)) == [(10, True), (20, True)]
    assert steps(to_delete(existing, RetentionPolicy(2))) == [(10, True), (20, True), (25, True), (26, True), (50, True)]


def test_a_damaged_checkpoint_is_deleted_and_never_takes_a_good_ones_place_among_the_kept():
    existing = entries((10, True), (20, True), (30, True), (31, True))  # 30 restore found damaged; 31 committed since
    damaged = frozenset(e.id for e in existing if e.id.step == 30)
    assert steps(to_delete(existing, RetentionPolicy(2), damaged=damaged)) == [(10, True), (30, True)]
    assert steps(to_delete(existing, RetentionPolicy(2))) == [(10, True), (20, True)]  # counted: 20 went for it


def test_a_damaged_checkpoint_is_not_deleted_before_a_good_one_is_committed():
    existing = entries((10, True), (11, False))
    assert to_delete(existing, RetentionPolicy(1), damaged=frozenset(e.id for e in existing)) == []


def test_retention_never_keeps_fewer_than_one():
    with pytest.raises(ValueError):
        RetentionPolicy(keep_last=0)


# -- schedule --------------------------------------------------------------------------

DUE_CASES = [
    ("a multiple of every_steps is due", 100, 5.0, SavePolicy(50, None), 50, False, True),
    ("a step between multiples is not due", 101, 5.0, SavePolicy(50, None), 100, False, False),
    ("the step just saved is never due again", 100, 999.0, SavePolicy(50, 1.0), 100, True, False),
    ("once every_seconds has passed, any step is due", 7, 301.0, SavePolicy(None, 300.0), 3, False, True),
    ("before every_seconds has passed, it is not", 7, 299.0, SavePolicy(None, 300.0), 3, False, False),
    ("a preemption notice makes the next step due at once", 7, 1.0, SavePolicy(1000, 3600.0), 3, True, True),
]


@pytest.mark.parametrize("step, now, policy, last_step, preempted, due", [c[1:] for c in DUE_CASES],
                         ids=[c[0] for c in DUE_CASES])
def test_due(step, now, policy, last_step, preempted, due):
    assert is_due(step, now, policy, last_step, 0.0, preempted) is due


# -- manifest --------------------------------------------------------------------------

MANIFEST = Manifest(step=3, created_at=1.5, files={"a": FileEntry(3, "aa"), "b": FileEntry(2, "bb")})

CHECK_CASES = [
    ("matching files verify", {"a": FileEntry(3, "aa"), "b": FileEntry(2, "bb")}, []),
    ("a missing file is named", {"a": FileEntry(3, "aa"), "b": None}, ["b is missing"]),
    ("a truncated file is named with both sizes", {"a": FileEntry(1, "aa"), "b": FileEntry(2, "bb")},
     ["a is 1 bytes, manifest says 3"]),
    ("a flipped byte is a sha256 mismatch", {"a": FileEntry(3, "xx"), "b": FileEntry(2, "bb")},
     ["a sha256 mismatch (corrupt)"]),
]


@pytest.mark.parametrize("observed, problems", [c[1:] for c in CHECK_CASES], ids=[c[0] for c in CHECK_CASES])
def test_check_files(observed, problems):
    assert check_files(MANIFEST, observed) == problems


def test_manifest_round_trips_and_its_marker_catches_any_change():
    data = MANIFEST.to_json()
    assert Manifest.from_json(data) == MANIFEST
    marker = commit_marker(data)
    assert check_marker(marker, data) is None
    assert "does not match" in check_marker(marker, data.replace(b'"step": 3', b'"step": 4'))
    with pytest.raises(ValueError):
        Manifest.from_json(b"{not json")
