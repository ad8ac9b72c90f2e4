"""Files headroom writes: whole or not at all.

Every file a command writes goes through `replace_whole` (`create_whole` for one that must be new): the content is
written to a new file beside the destination and renamed over it (linked to its name, when new), so an interruption
(SIGTERM, Ctrl-C, a full disk, an exception midway) leaves the earlier file intact, never a truncated one. A file
that grows as a long run goes (`headroom run --timeline`) is appended to by `append_whole`, which adds a record
completely or not at all.
"""
from __future__ import annotations

import errno
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

DRAFT_TOKEN_BYTES = 4


def is_draft_of(name: str, target: str) -> bool:
    """Whether a file called `name` is a draft of `target`: what `replace_whole` or `create_whole` fills before it
    takes the name, left behind only by a process killed outright (SIGKILL, a power cut)."""
    draft = re.escape(f".{target}.") + f"[0-9a-f]{{{2 * DRAFT_TOKEN_BYTES}}}" + re.escape(f".part{Path(target).suffix}")
    return re.fullmatch(draft, name) is not None


def replace_whole(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call `write(draft)` to fill a new file beside `path`, then put it in `path`'s place in one rename; returns
    `path`. If `write` raises (it may also check what it wrote, e.g. read it back), the draft is removed and `path`
    is as it was. A symlink stays a symlink: the file it points to is the one replaced."""
    return _whole(path, write, os.replace)


def create_whole(path: str | Path, write: Callable[[Path], object]) -> Path:
    """As replace_whole, for a file that must be new: one at `path` when the draft is put in place (also one made
    after the command checked, while it worked) raises FileExistsError and is left as it is."""
    return _whole(path, write, _link_new)


def _link_new(draft: Path, target: Path) -> None:
    os.link(draft, target)  # refused if target exists, in one step: no moment in which another file is replaced
    draft.unlink()


def _whole(path: str | Path, write: Callable[[Path], object], put: Callable[[Path, Path], None]) -> Path:
    path = Path(path)
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():  # a rename over a device (/dev/full) or a pipe would replace it
        raise OSError(errno.EINVAL, f"{target} is not a regular file (a device, a pipe?): it is not replaced")
    # same folder: a rename within one file system is atomic; the suffix kept: writers that infer a format from it
    draft = target.with_name(f".{target.name}.{secrets.token_hex(DRAFT_TOKEN_BYTES)}.part{target.suffix}")
    try:
        draft.touch(exist_ok=False)  # the umask's permissions, as a file opened for writing would have
        if target.exists():  # an earlier file's permissions are the ones it keeps
            os.chmod(draft, target.stat().st_mode & 0o7777)
        write(draft)
        with draft.open("rb") as handle:  # on disk before it takes the name: a power cut leaves the old or the new
            os.fsync(handle.fileno())
        put(draft, target)
    except BaseException:
        draft.unlink(missing_ok=True)
        raise
    return path


def append_whole(handle: int, data: bytes) -> None:
    """Append `data` to the file open (unbuffered) as `handle`, all of it or, on an error such as a full disk, none:
    a reader never meets half a record."""
    end = os.lseek(handle, 0, os.SEEK_END)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(handle, view):]
    except BaseException:
        os.ftruncate(handle, end)
        raise


def cannot_write_in(folder: str | Path) -> str | None:
    """Why no file can be made in `folder` (read-only, no permission, full), or None: tried, as the mode bits do not
    tell (root, ACLs, a read-only mount)."""
    probe = Path(folder, f".headroom-write-check-{secrets.token_hex(4)}")
    try:
        probe.open("xb").close()
    except OSError as exc:
        return exc.strerror or str(exc)
    probe.unlink()
    return None
