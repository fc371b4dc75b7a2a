"""Write small file trees (sysfs/procfs/etc fixtures) from a dict, and compare them.

A tree spec maps a path relative to the root to one of:

- ``str`` / ``bytes``: a regular file with that content;
- ``("link", target)``: a symlink (target kept as given, usually relative);
- ``("dir",)``: an empty directory.

``write_tree`` (re)writes only the paths named in the spec and leaves everything else in the
root alone, so several writers can share one fixture root.
"""

from __future__ import annotations

import builtins
import errno
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Tuple, Union

Entry = Union[str, bytes, Tuple[str, ...]]


def _kind(entry: Entry) -> str:
    if isinstance(entry, (str, bytes)):
        return "file"
    if isinstance(entry, tuple) and entry and entry[0] in ("link", "dir"):
        if entry[0] == "link" and len(entry) != 2:
            raise ValueError(f"link entry needs a target: {entry!r}")
        return entry[0]
    raise ValueError(f"unknown tree entry {entry!r}")


def _clear(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def write_tree(root: str | os.PathLike[str], spec: Mapping[str, Entry]) -> Path:
    """Create the entries of spec under root; an entry already right is left untouched."""
    base = Path(root)
    for rel, entry in spec.items():
        kind = _kind(entry)
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            data = entry.encode() if isinstance(entry, str) else entry
            assert isinstance(data, bytes)
            if path.is_file() and not path.is_symlink() and path.read_bytes() == data:
                continue
            if path.is_symlink() or path.is_dir():
                _clear(path)
            path.write_bytes(data)
        elif kind == "link":
            target = str(entry[1])
            if path.is_symlink() and os.readlink(path) == target:
                continue
            if path.is_symlink() or path.exists():
                _clear(path)
            os.symlink(target, path)
        else:
            if path.is_symlink() or path.is_file():
                _clear(path)
            path.mkdir(parents=True, exist_ok=True)
    return base


def diff_tree(root: str | os.PathLike[str], spec: Mapping[str, Entry]) -> list[str]:
    """Paths of spec that are missing or different under root (empty when all match)."""
    base = Path(root)
    problems: list[str] = []
    for rel, entry in spec.items():
        kind = _kind(entry)
        path = base / rel
        if kind == "file":
            data = entry.encode() if isinstance(entry, str) else entry
            if path.is_symlink() or not path.is_file():
                problems.append(f"{rel}: missing file")
            elif path.read_bytes() != data:
                problems.append(f"{rel}: content differs")
        elif kind == "link":
            if not path.is_symlink():
                problems.append(f"{rel}: missing symlink")
            elif os.readlink(path) != entry[1]:
                problems.append(f"{rel}: link points to {os.readlink(path)!r}, not {entry[1]!r}")
        elif path.is_symlink() or not path.is_dir():
            problems.append(f"{rel}: missing directory")
    return problems


def deny(monkeypatch: Any, paths: Iterable[str | os.PathLike[str]]) -> None:
    """Make opening, listing or reading the links of the given paths fail with EACCES.

    Tests run as root, where chmod 000 denies nothing; this makes the calls the probes
    use behave as for an unprivileged user.
    """
    denied = {os.path.abspath(os.fspath(p)) for p in paths}
    denied |= {os.path.realpath(p) for p in denied}
    real_readlink = os.readlink
    o_path = getattr(os, "O_PATH", 0)

    def named(path: Any, dir_fd: Any) -> str:
        # Under a --root that is not the live machine the probes open names relative to directory
        # descriptors (gpudoctor.rootfs.RootFS) and reopen /proc/self/fd/N: see what they name.
        name = os.fsdecode(path)
        if isinstance(dir_fd, int) and not os.path.isabs(name):
            base = real_readlink(f"/proc/self/fd/{dir_fd}")
            return os.path.join(base, name) if name else base
        if name.startswith("/proc/self/fd/"):
            try:
                return real_readlink(name)
            except OSError:
                return name
        return os.path.abspath(name)

    def check(path: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if isinstance(path, int):
            return
        flags = args[0] if args and isinstance(args[0], int) else kwargs.get("flags", 0)
        if o_path and isinstance(flags, int) and flags & o_path:
            return  # an O_PATH handle reads nothing: a permission does not stop it
        if named(path, kwargs.get("dir_fd")) in denied:
            raise PermissionError(errno.EACCES, "Permission denied", os.fsdecode(path))

    def wrap(func: Any) -> Any:
        def wrapper(path: Any, *args: Any, **kwargs: Any) -> Any:
            check(path, args, kwargs)
            return func(path, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(builtins, "open", wrap(builtins.open))
    monkeypatch.setattr(os, "open", wrap(os.open))
    monkeypatch.setattr(os, "listdir", wrap(os.listdir))
    monkeypatch.setattr(os, "readlink", wrap(os.readlink))


def generator_main(
    doc: str, scenarios: Mapping[str, Callable[[], Mapping[str, Entry]]], dest: Path, argv: list[str] | None = None
) -> int:
    """The command line shared by the fixture generators (tests/fixtures/make_*.py): write each
    scenario's files under DEST/<scenario>, or with --check only report differences (exit 1)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="scenario names (default: all)")
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    parser.add_argument("--dest", default=str(dest), help="directory holding the scenario trees")
    args = parser.parse_args(argv)
    names = args.scenarios or list(scenarios)
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(scenarios)}")
    status = 0
    for name in names:
        root = Path(args.dest) / name
        spec = scenarios[name]()
        if args.check:
            problems = diff_tree(root, spec)
            for problem in problems:
                print(f"{name}: {problem}")
            status |= bool(problems)
        else:
            write_tree(root, spec)
            print(f"{name}: {len(spec)} entries")
    return status
