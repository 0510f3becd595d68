"""A workdir whose files change while `broker submit` packs it (a build, a training run writing into it): a file or
directory gone since it was listed is left out, as rsync leaves out a file that vanished; a file whose size changes
while it is read is refused, naming it, rather than packed as neither its old content nor its new. Was a bare
"[Errno 2] No such file or directory" now and then, or tarfile's "unexpected end of data"."""

import io
import os
import shutil
from pathlib import Path

import pytest

import broker.workdir as workdir
from broker.workdir import PackError, pack, pack_file

pytestmark = pytest.mark.usefixtures("packs_in_tmp_path")


def tree(root: Path) -> Path:
    (root / "churn").mkdir(parents=True)
    (root / "gone" / "deep").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "big.bin").write_bytes(bytes(range(256)) * 800)
    for i in range(5):
        (root / "churn" / f"f{i}").write_text(f"{i}\n" * 100)
    (root / "gone" / "deep" / "x.txt").write_text("x\n")
    os.symlink("train.py", root / "link.py")
    return root


def members(p) -> list[str]:
    import tarfile

    with tarfile.open(p.path, "r:gz") as tar:
        return sorted(tar.getnames())


def test_files_removed_after_the_listing_are_left_out_and_the_digest_is_that_of_what_is_there(tmp_path, monkeypatch):
    root = tree(tmp_path / "w")
    listed = workdir.files_of

    def listing_then_removal(directory):
        entries = listed(directory)
        (root / "churn" / "f3").unlink()  # a build deleting its temporary files as `broker submit` packs
        (root / "link.py").unlink()
        shutil.rmtree(root / "gone")
        return entries

    monkeypatch.setattr(workdir, "files_of", listing_then_removal)
    packed = pack(root)
    monkeypatch.setattr(workdir, "files_of", listed)
    again = pack(root)  # the same directory, listed as it is now
    assert packed.digest == again.digest and packed.files == again.files == 6, members(packed)
    assert members(packed) == ["big.bin", "churn", "churn/f0", "churn/f1", "churn/f2", "churn/f4", "train.py"]
    assert sorted(os.listdir(tmp_path / "tmp")) == sorted([packed.path.name, again.path.name])


def test_files_and_directories_removed_while_the_directory_is_read_are_left_out(tmp_path, monkeypatch):
    root = tree(tmp_path / "w")
    tree(tmp_path / "expected")  # the same tree, less what vanishes below
    shutil.rmtree(tmp_path / "expected" / "gone")
    (tmp_path / "expected" / "churn" / "f1").unlink()
    expected = pack(tmp_path / "expected")
    real_listdir = os.listdir

    def racing_listdir(path):
        path = Path(path)
        if path == root / "gone":  # listed by its parent, removed before it was read itself
            shutil.rmtree(path)
        names = real_listdir(path)
        if path == root / "churn":  # listed, then removed before it was looked at
            (root / "churn" / "f1").unlink()
        return names

    monkeypatch.setattr(workdir.os, "listdir", racing_listdir)
    packed = pack(root)
    monkeypatch.setattr(workdir.os, "listdir", real_listdir)
    assert packed.digest == expected.digest, members(packed)
    assert "gone" not in members(packed) and "churn/f1" not in members(packed)


class _ChangesWhenRead(io.FileIO):
    """The file as ``open(path, "rb")`` gives it, but ``change()`` is done to it on disk at its first read, after
    the packer looked at its size: a log growing, a checkpoint rewritten shorter."""

    def __init__(self, path, change):
        super().__init__(path, "rb")
        self.change = change

    def read(self, n=-1):
        if self.change is not None:
            change, self.change = self.change, None
            change()
        return super().read(n)


@pytest.mark.parametrize("how, ignore", [("shrinks", ".gitignore"), ("grows", ".skyignore")])
def test_a_file_whose_size_changes_while_it_is_read_is_refused_naming_it(tmp_path, monkeypatch, how, ignore):
    """It names the ignore file the workdir's rules come from: told ".skyignore" in a workdir ruled by .gitignore
    files, a user who made one lost every .gitignore rule (a .skyignore replaces them)."""
    root = tree(tmp_path / "w")
    if ignore == ".skyignore":
        (root / ".skyignore").write_text("nothing-here\n")
    big = root / "big.bin"

    def change():
        if how == "shrinks":
            os.truncate(big, 1000)
        else:
            with open(big, "ab") as fh:
                fh.write(b"more" * 10_000)

    def opening(path, mode="r", *args, **kwargs):
        return _ChangesWhenRead(path, change) if Path(path) == big else open(path, mode, *args, **kwargs)

    monkeypatch.setattr(workdir, "open", opening, raising=False)
    with pytest.raises(PackError) as refused:
        pack(root)
    assert str(refused.value) == f"workdir {root}: file big.bin changed while it was packed; try again, or leave it " \
                                 f"out ({ignore}) if it keeps changing"
    assert os.listdir(tmp_path / "tmp") == []  # the half-written pack is removed
    monkeypatch.delattr(workdir, "open")
    assert pack(root).files == 9 + (ignore == ".skyignore")  # packed again once it is still (its .skyignore too)


def test_a_single_mounted_file_removed_before_it_is_read_is_refused_not_packed_empty(tmp_path, monkeypatch):
    vocab = tmp_path / "vocab.json"
    vocab.write_text("{}\n")

    def removed(path, mode="r", *args, **kwargs):
        if Path(path) == vocab:
            vocab.unlink()
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(workdir, "open", removed, raising=False)
    with pytest.raises(PackError, match=r"^file_mounts /data/v: not a file \(it was removed while it was packed\)$"):
        pack_file(vocab, what="file_mounts /data/v")
    assert os.listdir(tmp_path / "tmp") == []


def test_a_link_pointed_out_of_the_workdir_after_it_was_checked_is_refused_not_packed(tmp_path, monkeypatch):
    """A link is checked to lead inside the workdir as the directory is listed; pointed elsewhere before it was
    packed, the pack held a link to /etc, checked by no one until the broker refused the upload."""
    root = tree(tmp_path / "w")
    listed = workdir.files_of

    def listing_then_repointing(directory):
        entries = listed(directory)
        (root / "link.py").unlink()
        os.symlink("/etc/passwd", root / "link.py")
        return entries

    monkeypatch.setattr(workdir, "files_of", listing_then_repointing)
    with pytest.raises(PackError, match=r"^workdir .*: file link\.py changed while it was packed; try again"):
        pack(root)
    assert os.listdir(tmp_path / "tmp") == []
