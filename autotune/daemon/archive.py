"""A job's snapshot: the client packs a directory as tar.gz, the daemon unpacks it into the job's
own directory and nowhere else.

The check is written out here rather than left to ``tarfile``'s ``data`` filter because that
filter *repairs* some members (it strips a leading ``/``) where an upload must be *refused*: an
archive that names a path outside its root was not made by ``autotune submit``. The filter still
runs at extraction, as a second line: it resolves symlinks that earlier members created.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import tarfile
import zlib
from pathlib import Path

from autotune.errors import AutotuneError

DEFAULT_MAX_BYTES = 64 * 1024 ** 2
MAX_MEMBERS = 20_000
#: Never part of a snapshot: version control, caches, virtual environments, autotune's own state.
EXCLUDED_DIRS = {".git", ".hg", ".svn", ".autotune", "__pycache__", ".venv", "venv", "node_modules",
                 ".mypy_cache", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints"}
EXCLUDED_SUFFIXES = (".pyc", ".pyo")


class ArchiveError(AutotuneError):
    """An upload that is not a safe snapshot, or one too large."""


# -- the client's side --------------------------------------------------------------------------

def make_snapshot(root: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[bytes, int, list[str]]:
    """``root`` as a gzipped tar of relative paths; returns (archive, files, notes).

    Symlinks that stay inside ``root`` are kept as links; those that point outside are left out
    (the daemon would refuse them), with a note.
    """
    root = root.resolve()
    buf = io.BytesIO()
    total = files = 0
    notes: list[str] = []
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
            here = Path(dirpath)
            for name in [*dirnames, *sorted(filenames)]:
                path = here / name
                rel = path.relative_to(root).as_posix()
                if name.endswith(EXCLUDED_SUFFIXES):
                    continue
                if path.is_symlink():  # kept as a link; os.walk does not descend into it
                    target = path.resolve()
                    if target != root and root not in target.parents:
                        notes.append(f"left out {rel}: a symlink to {target}, outside {root}")
                        continue
                elif not (path.is_file() or path.is_dir()):
                    notes.append(f"left out {rel}: not a regular file")
                    continue
                info = tar.gettarinfo(str(path), arcname=rel)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isreg():
                    total += info.size
                    files += 1
                    if total > max_bytes:
                        raise ArchiveError(
                            f"the snapshot of {root} is over the daemon's limit of {_mib(max_bytes)}; "
                            "run from a smaller directory (--dir), keep data sets on shared storage, "
                            "or submit with --no-upload")
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    tar.addfile(info)
    return buf.getvalue(), files, notes


# -- the daemon's side --------------------------------------------------------------------------

def check_members(tar: tarfile.TarFile, max_bytes: int) -> list[tarfile.TarInfo]:
    """Every member, or an :class:`ArchiveError` for the first that could write outside the root:
    an absolute path, a ``..`` component, a link pointing out, a device file or fifo; and for a
    snapshot over ``max_bytes`` unpacked or ``MAX_MEMBERS`` entries."""
    members: list[tarfile.TarInfo] = []
    total = 0
    for m in tar:
        name = m.name
        _check_path(name, "path")
        if m.issym():
            if m.linkname.startswith("/") or _escapes(posixpath.join(posixpath.dirname(name), m.linkname)):
                raise ArchiveError(f"refused the upload: {name!r} is a symlink to {m.linkname!r}, outside the snapshot")
        elif m.islnk():
            _check_path(m.linkname, f"hard link target of {name!r}")
        elif not (m.isreg() or m.isdir()):
            raise ArchiveError(f"refused the upload: {name!r} is a device file or fifo; a snapshot holds "
                               "files, directories and links")
        total += m.size if m.isreg() else 0
        if total > max_bytes:
            raise ArchiveError(f"refused the upload: over the daemon's limit of {_mib(max_bytes)} unpacked")
        members.append(m)
        if len(members) > MAX_MEMBERS:
            raise ArchiveError(f"refused the upload: more than {MAX_MEMBERS} entries")
    return members


def extract_snapshot(archive: Path, dest: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> int:
    """Unpack ``archive`` into the new directory ``dest``; returns the number of files. A refused
    archive leaves no ``dest`` behind."""
    dest.mkdir(parents=True, exist_ok=False)
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = check_members(tar, max_bytes)
            tar.extractall(dest, members=members, filter="data")
    except BaseException as exc:
        shutil.rmtree(dest, ignore_errors=True)
        if isinstance(exc, tarfile.FilterError):  # a path that leaves the root once earlier links resolve
            raise ArchiveError(f"refused the upload: {exc}") from None
        if isinstance(exc, (tarfile.TarError, EOFError, OSError, ValueError, zlib.error)):
            raise ArchiveError(f"refused the upload: not a readable tar.gz snapshot ({exc})") from None
        raise
    return sum(1 for m in members if m.isreg())


def _check_path(name: str, what: str) -> None:
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        raise ArchiveError(f"refused the upload: the {what} {name!r} is absolute or malformed")
    if ".." in name.split("/"):
        raise ArchiveError(f"refused the upload: the {what} {name!r} has a '..' component")


def _escapes(relative: str) -> bool:
    normal = posixpath.normpath(relative)
    return normal == ".." or normal.startswith("../") or normal.startswith("/")


def _mib(n: int) -> str:
    return f"{n / 1024 ** 2:g} MiB"
