"""Snapshots: what the client packs, and what the daemon refuses to unpack."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from autotune.daemon.archive import ArchiveError, extract_snapshot, make_snapshot


def _archive(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes | None]) -> Path:
    path = tmp_path / "upload.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return path


def _file(name: str, data: bytes = b"print('hi')\n") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def _special(name: str, kind: bytes) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info, None


@pytest.mark.parametrize("member, why", [
    (_file("../escape.py"), "'..'"),
    (_file("sub/../../escape.py"), "'..'"),
    (_file("/tmp/escape.py"), "absolute"),
    (_link("data", "/etc"), "outside"),
    (_link("sub/data", "../../etc"), "outside"),
    (_link("hard", "../escape.py", tarfile.LNKTYPE), "'..'"),
    (_link("hard", "/etc/passwd", tarfile.LNKTYPE), "absolute"),
    (_special("dev", tarfile.CHRTYPE), "device file"),
    (_special("fifo", tarfile.FIFOTYPE), "device file or fifo"),
])
def test_a_member_that_could_write_outside_is_refused(tmp_path: Path, member, why: str) -> None:
    archive = _archive(tmp_path, _file("train.py"), member)
    dest = tmp_path / "jobs" / "job-1" / "src"
    with pytest.raises(ArchiveError, match=why):
        extract_snapshot(archive, dest)
    assert not (tmp_path / "escape.py").exists() and not (tmp_path / "jobs" / "escape.py").exists()
    assert not dest.exists(), "nothing is left of a refused archive"


def test_a_link_through_an_earlier_symlink_is_refused(tmp_path: Path) -> None:
    # Each path is harmless on its own; together the file would land outside (the data filter's realpath check).
    (tmp_path / "outside").mkdir()
    archive = _archive(tmp_path, _link("a", "."), _link("a/b", "../outside"), _file("b/x.py"))
    with pytest.raises(ArchiveError, match="outside"):
        extract_snapshot(archive, tmp_path / "dest")
    assert not (tmp_path / "outside" / "x.py").exists()


def test_an_oversized_snapshot_is_refused(tmp_path: Path) -> None:
    archive = _archive(tmp_path, _file("train.py"), _file("big.bin", b"\0" * 4096))
    with pytest.raises(ArchiveError, match="limit"):
        extract_snapshot(archive, tmp_path / "dest", max_bytes=1024)


def test_garbage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "upload.tar.gz"
    path.write_bytes(b"this is not a tar.gz")
    with pytest.raises(ArchiveError, match="not a readable"):
        extract_snapshot(path, tmp_path / "dest")


def test_a_project_round_trips(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "train.py").write_text("import pkg.model\n")
    (project / "pkg" / "model.py").write_text("X = 1\n")
    (project / "pkg" / "alias.py").symlink_to("model.py")
    (project / ".git").mkdir()
    (project / ".git" / "HEAD").write_text("ref\n")
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (project / "secrets").symlink_to(tmp_path)  # points outside: left out, with a note

    data, files, notes = make_snapshot(project)
    assert files == 2 and any("secrets" in n for n in notes)
    archive = tmp_path / "snap.tar.gz"
    archive.write_bytes(data)
    dest = tmp_path / "dest"
    assert extract_snapshot(archive, dest) == 2
    assert (dest / "train.py").read_text() == "import pkg.model\n"
    assert os.readlink(dest / "pkg" / "alias.py") == "model.py"
    assert not (dest / ".git").exists() and not (dest / "__pycache__").exists() and not (dest / "secrets").exists()


def test_the_client_stops_at_the_daemons_limit(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("pass\n")
    (tmp_path / "data.bin").write_bytes(b"\0" * 4096)
    with pytest.raises(ArchiveError, match="--no-upload"):
        make_snapshot(tmp_path, max_bytes=1024)
