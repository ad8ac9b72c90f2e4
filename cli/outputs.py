"""The files and folders a command is asked to write, checked before any work: never one of the command's own
inputs, never another output of the same command, never a file of another kind than the flag writes, and in a
folder that exists and can be written. Each refusal names the flag (BadRequest: exit 2)."""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from core.errors import BadRequest, HeadroomError
from core.files import cannot_write_in

# (the path, or None when not given; how the user gave it: a flag, or a configuration field)
Named = tuple[str | Path | None, str]


def command_inputs(cfg, args) -> list[Named]:
    """Every file a command reads: the configuration, the demand, the job trace and the policies (and run's
    policies' histories)."""
    run_policy_files = args.policy_file if isinstance(getattr(args, "policy_file", None), list) else []
    return [(getattr(args, "sub_config", None) or getattr(args, "config", None), "--config"),
            (cfg.history.file, "DEMAND (history.file)"), (cfg.simulate.jobs, "--jobs (simulate.jobs)"),
            (cfg.simulate.policy_file, "--policy-file (simulate.policy_file)"),
            *((f, "--policy-file") for f in run_policy_files),
            *((p.history_file, f"the history of policy {p.namespace}/{p.name} (--history, run.policies)")
              for p in cfg.run.policies)]


def _same_file(a: Path, b: Path) -> bool:
    """One file, however named: through a symlink, `..`, or a hard link."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): only the names could be the same
        return False


def _clash(path: Path, label: str, others: Iterable[Named]) -> None:
    """`path` (what `label` names) is none of `others`."""
    for other, what in others:
        if other is not None and _same_file(path, Path(other)):
            raise BadRequest(f"{label} is the file {what} names ({other}); the command would write over it: name "
                             "another file")


def _own_output(flag: str) -> tuple[str, bytes] | None:
    """What an output flag writes, and how its file begins: it replaces such a file (a re-run), never another one."""
    if flag == "--timeline":
        from controller.simulate import TIMELINE_COLUMNS

        return "a timeline", ",".join(TIMELINE_COLUMNS).encode()
    return _own_file(".png") if flag == "--plot" else None


def _own_file(name: str) -> tuple[str, bytes] | None:
    """What a file headroom writes under `name` into a folder is, and how it begins (as _own_output)."""
    if name.endswith(".png"):
        return "a PNG plot", b"\x89PNG"
    if name.endswith(".html"):
        from dashboards.report import PAGE_HEAD

        return "a report page", PAGE_HEAD.encode()
    return None


def _not_of_another_kind(target: Path, label: str, own: tuple[str, bytes] | None, other: str = "file") -> None:
    """An existing `target` is the kind of file `own` says headroom writes there (a re-run replaces it), not another
    file (an SRE's data) of the same name."""
    if own is None or not target.is_file():
        return
    what, head = own
    try:
        with target.open("rb") as handle:
            ours = handle.read(len(head)) == head
    except OSError:
        ours = False
    if not ours:
        raise BadRequest(f"{label}: the file exists and is not {what} headroom wrote; it is not overwritten (it may "
                         f"be your data): remove it or name a new {other}")


def _no_device(target: Path, label: str) -> None:
    """An existing `target` is a file or a folder: a device (/dev/full) or a pipe is not one to replace, nor to
    read."""
    if target.exists() and not target.is_file() and not target.is_dir():
        raise BadRequest(f"{label}: is not a regular file (a device, a pipe?); name a file")


def _not_empty(path: str | Path, flag: str) -> None:
    if str(path) == "":  # Path("") is the working directory: a report was written among the files there
        raise BadRequest(f"{flag}: an empty path; name a file or folder")


def _writable_folder(folder: Path, flag: str, path: str | Path) -> None:
    if (why := cannot_write_in(folder)) is not None:
        raise BadRequest(f"{flag} {path}: cannot write in the folder {folder}: {why}")


def check_output_files(outputs: Sequence[Named], inputs: Sequence[Named] = ()) -> None:
    """Each (path, flag) given must name a file in an existing folder this process can write in, not one of
    `inputs`, not another of `outputs`, and not an existing file of another kind than the flag writes (an SRE's
    notes): checked before any work, not after it."""
    for path, flag in outputs:
        if path is not None:
            _not_empty(path, flag)
    given = [(Path(path), flag) for path, flag in outputs if path is not None]
    for k, (target, flag) in enumerate(given):
        if target.is_dir():
            raise BadRequest(f"{flag} {target}: is a directory; give a file name")
        folder = target.resolve().parent
        if not folder.is_dir():
            raise BadRequest(f"{flag} {target}: " + (f"{folder} is a file, not a folder" if folder.exists() else
                                                     f"the folder {folder} does not exist"))
        _writable_folder(folder, flag, target)
        _clash(target, f"{flag} {target}", [*inputs, *given[:k]])
        _no_device(target, f"{flag} {target}")
        _not_of_another_kind(target, f"{flag} {target}", _own_output(flag))
        if flag == "--plot" and target.suffix.lower() != ".png":  # the plot's format follows the name's suffix
            raise BadRequest(f"{flag} {target}: the plot is a PNG; name a .png file")


def check_output_dir(path: str | Path, flag: str, writes: Iterable[str], others: Sequence[Named] = (),
                     own: Mapping[str, tuple[str, bytes]] | None = None) -> None:
    """A folder the command writes the files `writes` into (replacing its own earlier ones, never other files of
    those names: a PNG, a report page, or as `own` says what a name holds and how it begins): not an existing file,
    and none of `writes` one of `others` (the command's inputs and other outputs). Nothing is made yet."""
    _not_empty(path, flag)
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise BadRequest(f"{flag} {path}: exists and is not a directory")
    for name in writes:
        _clash(target / name, f"{flag} {path}: its {name}", others)
        _no_device(target / name, f"{flag} {path}: its {name}")
        kind = (own or {}).get(name) or _own_file(name)
        _not_of_another_kind(target / name, f"{flag} {path}: its {name}", kind, "folder")


def make_output_dir(path: str | Path, flag: str) -> Path:
    """The folder to write into, made now (with its parents) so that a bad folder fails at once and not after
    minutes of simulation."""
    target = Path(path).resolve()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadRequest(f"{flag} {path}: cannot make the folder: {exc.strerror or exc}") from None
    _writable_folder(target, flag, path)
    return target


@contextmanager
def writing(flag: str, path: str | Path) -> Iterator[None]:
    """The block writes `path`, the output `flag` names, whole or not at all (core.files): a write that fails there (a
    full disk, a quota, an I/O error) is an error naming both, not a bare errno (exit 1: the work is done, its output
    lost). A file that must be new and is found made meanwhile (FileExistsError) is the caller's to say."""
    try:
        yield
    except FileExistsError:
        raise
    except OSError as exc:
        raise HeadroomError(f"{flag} {path}: cannot write it: {exc.strerror or exc}; nothing half-written is left "
                            "there") from None


class ReaderGone(Exception):
    """The reader of stdout or stderr closed it (`headroom ... | head -1`): the command ends quietly. Not an OSError:
    nothing that handles a file or a server that failed takes it for one."""

    def __init__(self, name: str):
        super().__init__(f"the reader of {name} closed it")


# what a pipe holds on Linux: an output up to this long is written whole before its reader can have gone
PIPE_BYTES = 64 * 1024


class NamedStream:
    """sys.stdout or sys.stderr, whose failed writes say which stream failed: a closed pipe is ReaderGone, any other
    failure (a full disk under `> FILE`) an error naming the stream, not a bare errno. Where it is not a terminal and
    `collect`, its writes are held and written at once at the next flush (or every PIPE_BYTES): under
    PYTHONUNBUFFERED each print was two writes, and `| head -1`, gone after the first, cut an output that fitted the
    pipe (exit 141 where README says 0). `first`: a stream whose held writes go out before each of this one's (stdout
    before stderr's notes and errors, which keep their order in one terminal or file)."""

    def __init__(self, stream, name: str, collect: bool = False, first: NamedStream | None = None):
        self.stream, self.name, self.first = stream, name, first
        self._held: list[str] | None = [] if collect and not stream.isatty() else None
        self._held_chars = 0

    def write(self, text: str) -> int:
        if self.first is not None:
            self.first.flush()
        if self._held is None:
            with self._failing():
                written: int = self.stream.write(text)
            return written
        self._held.append(text)
        self._held_chars += len(text)
        if self._held_chars >= PIPE_BYTES:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if self._held:
            text = "".join(self._held)
            self._held.clear()
            self._held_chars = 0
            with self._failing():
                self.stream.write(text)
        with self._failing():
            self.stream.flush()

    def __getattr__(self, attribute: str):
        return getattr(self.stream, attribute)

    @contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            raise ReaderGone(self.name) from None
        except OSError as exc:
            raise HeadroomError(f"{self.name}: cannot write the output: {exc.strerror or exc}") from None

    def silence(self) -> None:
        """From now on, what is written to the stream goes nowhere, also what is left in its buffer when Python exits
        (the recipe of Python's signal docs, "Note on SIGPIPE")."""
        try:
            fd = self.stream.fileno()
        except (OSError, ValueError):  # no file descriptor (a test's captured stream): nothing is flushed at exit
            return
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
