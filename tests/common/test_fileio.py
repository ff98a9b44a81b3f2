"""Safe file primitives: symlink refusal, modes, atomic replacement, CSVs shared by processes."""

from __future__ import annotations

import csv
import errno
import multiprocessing
import os
import stat

import pytest

from msprobe.core.services.fileio import (
    DumpWriteError,
    UnsafePathError,
    append_csv_rows,
    atomic_write_bytes,
    atomic_write_text,
    check_writable_path,
    link_written,
    make_dir,
    write_csv,
    write_file,
)


@pytest.fixture(autouse=True)
def usual_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)




def test_check_writable_path_returns_the_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_writable_path("out/dump") == tmp_path / "out" / "dump"
    assert check_writable_path(tmp_path / "x") == tmp_path / "x"


def test_check_writable_path_refuses_a_symlink_anywhere_in_a_relative_path(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsafePathError, match="'link' is a symlink"):
        check_writable_path("link/dump")


def test_check_writable_path_refuses_a_symlinked_last_component(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafePathError, match="symlink"):
        check_writable_path(tmp_path / "link")


def test_make_dir_creates_every_missing_level_0o750(tmp_path):
    made = make_dir(tmp_path / "a" / "b" / "c")
    assert made.is_dir()
    for path in (tmp_path / "a", tmp_path / "a" / "b", made):
        assert mode(path) == 0o750, path
    assert make_dir(made) == made  # existing directory: fine


def test_make_dir_refuses_a_symlink_and_a_file(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafePathError, match="symlink"):
        make_dir(tmp_path / "link")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError):
        make_dir(tmp_path / "file")


def test_atomic_write_replaces_whole_file_with_mode_0o640(tmp_path):
    target = tmp_path / "result.csv"
    target.write_text("old content that is longer than the new one")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    atomic_write_bytes(tmp_path / "fresh.bin", b"\x00\x01")
    assert (tmp_path / "fresh.bin").read_bytes() == b"\x00\x01"
    assert mode(tmp_path / "fresh.bin") == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.bin", "result.csv"]


def test_atomic_write_does_not_follow_a_planted_temp_symlink(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    target = tmp_path / "out.json"
    planted = tmp_path / f".out.json.{os.getpid()}.tmp"
    planted.symlink_to(victim)
    atomic_write_text(target, "payload")  # the temporary file is created exclusively: the link is replaced
    assert victim.read_text() == "keep me"
    assert target.read_text() == "payload" and not target.is_symlink()
    assert not os.path.lexists(planted)


def test_write_csv_reads_back(tmp_path):
    rows = [["Torch.add.0.forward", 1.5, None], ["Tensor.mul.1.backward", "a,b", 'quote"d']]
    write_csv(tmp_path / "r.csv", ["name", "value", "note"], rows)
    with open(tmp_path / "r.csv", newline="") as handle:
        back = list(csv.reader(handle))
    assert back == [
        ["name", "value", "note"],
        ["Torch.add.0.forward", "1.5", ""],
        ["Tensor.mul.1.backward", "a,b", 'quote"d'],
    ]
    assert mode(tmp_path / "r.csv") == 0o640


def _append_from_process(path: str, worker: int) -> None:
    for batch in range(20):
        rows = [[worker, batch, line, "x" * 200] for line in range(10)]
        append_csv_rows(path, ["worker", "batch", "line", "pad"], rows)


def test_append_csv_rows_from_several_processes_never_interleaves(tmp_path):
    path = str(tmp_path / "shared.csv")
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_append_from_process, args=(path, w)) for w in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["worker", "batch", "line", "pad"]
    body = rows[1:]
    assert len(body) == 4 * 20 * 10
    assert all(len(row) == 4 and row[3] == "x" * 200 for row in body)
    assert sorted((int(r[0]), int(r[1]), int(r[2])) for r in body) == [
        (w, b, line) for w in range(4) for b in range(20) for line in range(10)
    ]
    for start in range(0, len(body), 10):  # each call's ten rows stay together, in order
        batch = body[start : start + 10]
        assert {(r[0], r[1]) for r in batch} == {(batch[0][0], batch[0][1])}
        assert [int(r[2]) for r in batch] == list(range(10))
    assert mode(path) == 0o640


def test_a_refused_write_leaves_nothing_and_reports_the_disks_error(tmp_path, file_size_limit):
    target = tmp_path / "big.bin"
    with file_size_limit(4096), pytest.raises(DumpWriteError) as caught:
        write_file(target, lambda handle: handle.write(bytes(100_000)))
    assert caught.value.errno == errno.EFBIG and caught.value.filename == str(target)
    assert 100_000 - 4096 <= caught.value.needed <= 100_000
    assert list(tmp_path.iterdir()) == []


def _like_torch_save(handle) -> None:
    """What torch.save does with a failed write: the OSError becomes a RuntimeError without its errno."""
    try:
        handle.write(bytes(100_000))
    except OSError:
        raise RuntimeError("[enforce fail at inline_container.cc] PytorchStreamWriter failed writing file") from None


def test_a_disk_error_that_a_serialiser_wrapped_is_still_reported_as_itself(tmp_path, file_size_limit):
    with file_size_limit(4096), pytest.raises(DumpWriteError) as caught:
        write_file(tmp_path / "t.pt", _like_torch_save)
    assert caught.value.errno == errno.EFBIG and "File too large" in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_an_error_that_is_not_the_disks_passes_through_and_leaves_nothing(tmp_path):
    with pytest.raises(ZeroDivisionError):
        write_file(tmp_path / "t.pt", lambda handle: handle.write(bytes(10)) / 0)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_atomic_write_keeps_the_old_file(tmp_path, file_size_limit):
    target = tmp_path / "dump.json"
    target.write_text("{}")
    with file_size_limit(4096), pytest.raises(DumpWriteError):
        atomic_write_bytes(target, bytes(100_000))
    assert target.read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == ["dump.json"]


def test_writing_replaces_a_linked_file_instead_of_writing_through_it(tmp_path):
    first = write_file(tmp_path / "a.pt", lambda handle: handle.write(b"old"))
    assert link_written(first, tmp_path / "b.pt")
    write_file(tmp_path / "b.pt", lambda handle: handle.write(b"new"))
    assert (tmp_path / "a.pt").read_bytes() == b"old" and (tmp_path / "b.pt").read_bytes() == b"new"


def test_link_written_links_only_our_unchanged_file_in_the_same_directory(tmp_path):
    ours = write_file(tmp_path / "a.pt", lambda handle: handle.write(b"ours"))
    assert link_written(ours, tmp_path / "b.pt") and os.path.samefile(tmp_path / "a.pt", tmp_path / "b.pt")
    assert link_written(ours, tmp_path / "b.pt")  # again, onto an existing name: replaced, not an error
    (tmp_path / "sub").mkdir()
    assert not link_written(ours, tmp_path / "sub" / "c.pt")  # another directory: never linked
    (tmp_path / "a.pt").rename(tmp_path / "moved.pt")  # moved aside ...
    (tmp_path / "a.pt").write_bytes(b"someone else's")  # ... and another file put in its place
    assert not link_written(ours, tmp_path / "d.pt")
    assert not (tmp_path / "d.pt").exists() and not (tmp_path / "sub" / "c.pt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
