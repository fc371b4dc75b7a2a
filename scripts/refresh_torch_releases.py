#!/usr/bin/env python3
"""Refresh rules/data/torch_releases.yaml from PyPI's JSON API and PyTorch's wheel indexes.

python scripts/refresh_torch_releases.py                 # dry run: the diff and what changed (default)
python scripts/refresh_torch_releases.py --write         # write the refreshed table
python scripts/refresh_torch_releases.py --from DIR      # read recorded copies of the pages instead
python scripts/refresh_torch_releases.py --no-wheel-index  # PyPI only

What is read, each page bounded (a timeout per request, a size cap, a cap on the request count):
- https://pypi.org/pypi/<project>/json for torch, torchvision and torchaudio: every release, the
  files of each (wheel names give the CPython tags of the Linux x86_64 wheels), upload times, and
  the newest release's Requires-Dist;
- https://pypi.org/pypi/<project>/<version>/json for the newest patch of the newest minors and for
  companion candidates: their Requires-Dist (the CUDA pin that says which build plain `pip install
  torch` gets; the torch pin of a torchvision release). A 404 is not an error: the value is left as
  it was (some mirrors of PyPI serve only the project page);
- https://download.pytorch.org/whl/<variant>/torch/ (PEP 503 pages) for each variant the table
  names: which releases each variant publishes Linux x86_64 wheels for. An index that cannot be
  reached changes nothing and is reported.

What it writes (merge, never clobber): the figures that are read off these pages are refreshed
(latest, released, uploaded, python, pypi_default; retrieved); a companion pin (torchvision,
torchaudio) is filled only where the table has none; a variant the wheel index lists is marked
verified (its lead flag dropped, the index named in its source), and a variant the table does not
know yet is added with its arch list or gfx list null (the index does not state them: the advice
never picks a build whose arch list is unknown). Hand-written notes, sources, arch lists and judged
values are kept; where the pages disagree with them the disagreement is printed, not written.

The table is edited line by line (its comments, anchors and layout stay), and the edited text is
read back and compared with the intended data before anything is written.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import difflib
import html.parser
import json
import os
import re
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "rules" / "data" / "torch_releases.yaml"
PYPI = "https://pypi.org/pypi"
WHEEL_INDEX = "https://download.pytorch.org/whl"
COMPANIONS = ("torchvision", "torchaudio")
TIMEOUT_S = 20.0
MAX_JSON_BYTES = 16 << 20  # the torch project page is about 0.9 MB
MAX_INDEX_BYTES = 16 << 20
MAX_REQUESTS = 60
PER_VERSION_MINORS = 3  # per-version pages for the newest patch of this many newest minors
COMPANION_WINDOW = dt.timedelta(days=2)  # a companion is published with its torch release

_WHEEL_RE = re.compile(
    r"(?P<name>[A-Za-z0-9_.]+)-(?P<version>[0-9][A-Za-z0-9_.+!]*)(?:-[0-9][A-Za-z0-9_.]*)?"
    r"-(?P<py>[a-z0-9_.]+)-(?P<abi>[a-z0-9_.]+)-(?P<plat>[a-z0-9_.]+)\.whl"
)
_CP_RE = re.compile(r"cp3([0-9]{1,2})")
_CUDA_PIN_RE = re.compile(
    r"^(?:cuda-toolkit(?:\[[^\]]*\])?|nvidia-cuda-runtime-cu[0-9]{2})\s*==\s*([0-9]{2})\.([0-9])(?:\.[0-9.]+)?\s*(?:;|$)"
)


class FetchError(Exception):
    """A page could not be read (network, HTTP status other than 404, over the size cap).
    ``reached`` is False where the host itself did not answer (no other page of it is tried)."""

    def __init__(self, message: str, reached: bool = True) -> None:
        super().__init__(message)
        self.reached = reached


Fetch = Callable[[str, int], Optional[bytes]]  # (url, max bytes) -> body, None for 404


def http_fetch(timeout: float = TIMEOUT_S, max_requests: int = MAX_REQUESTS) -> Fetch:
    count = [0]

    def fetch(url: str, cap: int) -> bytes | None:
        if not url.startswith("https://"):
            raise FetchError(f"{url}: only https URLs are read")
        count[0] += 1
        if count[0] > max_requests:
            raise FetchError(f"{url}: more than {max_requests} requests; stopped")
        req = urllib.request.Request(url, headers={"User-Agent": "gpudoctor-refresh-torch-releases"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (https only, above)
                body = resp.read(cap + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise FetchError(f"{url}: HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise FetchError(f"{url}: {getattr(exc, 'reason', exc)}", reached=False) from exc
        if len(body) > cap:
            raise FetchError(f"{url}: larger than {cap} bytes; not read")
        return body

    return fetch


def recorded_name(url: str) -> str:
    """The file name a recorded copy of ``url`` has under --from DIR: host and path, '/' as '_'."""
    parts = urllib.parse.urlsplit(url)
    return (parts.netloc + parts.path).strip("/").replace("/", "_")


def dir_fetch(directory: Path) -> Fetch:
    """Recorded copies: a missing file is a page that is not there (404) unless the whole host is
    missing from the directory, which reads as a host that cannot be reached."""

    def fetch(url: str, cap: int) -> bytes | None:
        name = recorded_name(url)
        host = urllib.parse.urlsplit(url).netloc
        if not any(p.name.startswith(host + "_") for p in directory.iterdir()):
            raise FetchError(f"{url}: no recorded copy of {host} (not reached)", reached=False)
        path = directory / name
        if not path.is_file():
            return None
        with path.open("rb") as f:
            body = f.read(cap + 1)
        if len(body) > cap:
            raise FetchError(f"{url}: larger than {cap} bytes; not read")
        return body

    return fetch


# ---------------------------------------------------------------------------- parsing pages


@dataclass
class Release:
    version: Version
    uploaded: dt.datetime | None = None
    pythons: set[str] = field(default_factory=set)  # "3.12" for each cp312 Linux x86_64 wheel
    requires: list[str] | None = None  # Requires-Dist, where a page gave it


def parse_wheel(filename: str) -> dict[str, str] | None:
    m = _WHEEL_RE.fullmatch(filename)
    return m.groupdict() if m else None


def linux_x86_64(plat: str) -> bool:
    return any(p.endswith("x86_64") and ("linux" in p) for p in plat.split("."))


def cpython_of(py: str, abi: str) -> str | None:
    """ "cp312", "cp312" -> "3.12"; free-threaded (cp314t) and other ABIs -> None."""
    m = _CP_RE.fullmatch(py)
    return f"3.{m.group(1)}" if m and abi == py else None


def _time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def parse_project(body: bytes) -> tuple[dict[str, Release], str | None]:
    """PyPI's project JSON: the final releases with at least one file not yanked, and the version
    the page's info describes (whose Requires-Dist it carries)."""
    data = json.loads(body)
    if not isinstance(data, dict) or not isinstance(data.get("releases"), dict):
        raise ValueError("not a PyPI project page (no releases)")
    info = data.get("info") if isinstance(data.get("info"), dict) else {}
    out: dict[str, Release] = {}
    for text, files in data["releases"].items():
        try:
            version = Version(str(text))
        except InvalidVersion:
            continue
        if version.is_prerelease or version.is_devrelease or version.local or not isinstance(files, list):
            continue
        live = [f for f in files if isinstance(f, dict) and not f.get("yanked")]
        if not live:
            continue
        rel = Release(version)
        for f in live:
            t = _time(f.get("upload_time_iso_8601") or f.get("upload_time"))
            if t is not None and (rel.uploaded is None or t < rel.uploaded):
                rel.uploaded = t
            w = parse_wheel(str(f.get("filename", "")))
            if w and linux_x86_64(w["plat"]):
                py = cpython_of(w["py"], w["abi"])
                if py:
                    rel.pythons.add(py)
        out[str(version)] = rel
    name = info.get("version") if isinstance(info, dict) else None
    if isinstance(name, str) and name in out and isinstance(info.get("requires_dist"), list):
        out[name].requires = [str(r) for r in info["requires_dist"]]
    return out, name if isinstance(name, str) else None


def parse_requires(body: bytes) -> list[str] | None:
    """A per-version PyPI page: its Requires-Dist (None when the page has none)."""
    data = json.loads(body)
    info = data.get("info") if isinstance(data, dict) else None
    reqs = info.get("requires_dist") if isinstance(info, dict) else None
    return [str(r) for r in reqs] if isinstance(reqs, list) else None


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.names: list[str] = []
        self._in_a = False
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._in_a, self._text = True, []

    def handle_data(self, data: str) -> None:
        if self._in_a:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._in_a:
            self._in_a = False
            self.names.append("".join(self._text).strip())


def parse_simple_index(body: bytes) -> list[str]:
    """The file names a PEP 503 simple page links to (each anchor's text)."""
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    parser.close()
    return parser.names


def index_releases(names: list[str], variant: str) -> dict[str, set[str]]:
    """torch releases with Linux x86_64 wheels of ``variant`` on its index page: {"2.15.0": {"3.12"}}.
    A wheel without a local version (the cpu index's plain Linux wheels, aarch64 ones) counts for
    the cpu variant only."""
    out: dict[str, set[str]] = {}
    for name in names:
        w = parse_wheel(name)
        if not w or w["name"] != "torch" or not linux_x86_64(w["plat"]):
            continue
        try:
            version = Version(w["version"])
        except InvalidVersion:
            continue
        local = version.local
        if version.is_prerelease or version.is_devrelease or (local or "cpu") != variant:
            continue
        py = cpython_of(w["py"], w["abi"])
        if py:
            out.setdefault(version.base_version, set()).add(py)
    return out


def cuda_variant_of(requires: list[str] | None) -> str | None:
    """cu132 for a Linux `cuda-toolkit==13.2.2` / `nvidia-cuda-runtime-cu12==12.8.90` pin."""
    for req in requires or []:
        m = _CUDA_PIN_RE.match(req.strip())
        if m and ("platform_system" not in req or '"Linux"' in req or "'Linux'" in req):
            return f"cu{m.group(1)}{m.group(2)}"
    return None


def torch_spec(requires: list[str] | None) -> SpecifierSet | None:
    for req in requires or []:
        m = re.match(r"^torch\s*(\(?[<>=!~][^;]*?)\)?\s*(?:;.*)?$", req.strip())
        if m:
            try:
                return SpecifierSet(m.group(1).strip().strip("()"))
            except InvalidSpecifier:
                return None
    return None


# ---------------------------------------------------------------------------- reading the pages


@dataclass
class Pages:
    torch: dict[str, Release]
    companions: dict[str, dict[str, Release]]
    index: dict[str, dict[str, set[str]]]  # variant -> releases listed (reached indexes only)
    unreached: dict[str, str]  # variant or page -> why it was not read
    fetch: Fetch


def minor_of(version: Version) -> str:
    return f"{version.major}.{version.minor}"


def by_minor(releases: dict[str, Release], oldest: Version) -> dict[str, list[Release]]:
    out: dict[str, list[Release]] = {}
    for rel in releases.values():
        if Version(minor_of(rel.version)) >= oldest:
            out.setdefault(minor_of(rel.version), []).append(rel)
    for rels in out.values():
        rels.sort(key=lambda r: r.version)
    return dict(sorted(out.items(), key=lambda kv: Version(kv[0])))


def requires_of(pages: Pages, project: str, rel: Release) -> list[str] | None:
    """Requires-Dist of one release: from the project page (newest release) or its own page."""
    if rel.requires is None and project not in pages.unreached:
        url = f"{PYPI}/{project}/{rel.version}/json"
        try:
            body = pages.fetch(url, MAX_JSON_BYTES)
            rel.requires = parse_requires(body) if body is not None else None
            if body is None:
                pages.unreached[f"{project} {rel.version}"] = f"{url}: not found (its Requires-Dist is not known)"
        except (FetchError, ValueError) as exc:
            pages.unreached[f"{project} {rel.version}"] = str(exc)
    return rel.requires


def read_pages(rows: dict[str, Any], fetch: Fetch, wheel_index: bool, variants: list[str]) -> Pages:
    body = fetch(f"{PYPI}/torch/json", MAX_JSON_BYTES)
    if body is None:
        raise FetchError(f"{PYPI}/torch/json: not found")
    torch, _ = parse_project(body)
    pages = Pages(torch=torch, companions={}, index={}, unreached={}, fetch=fetch)
    for project in COMPANIONS:
        try:
            body = fetch(f"{PYPI}/{project}/json", MAX_JSON_BYTES)
            pages.companions[project] = parse_project(body)[0] if body else {}
        except (FetchError, ValueError) as exc:
            pages.unreached[project] = str(exc)
    if wheel_index:
        for variant in variants:
            url = f"{WHEEL_INDEX}/{variant}/torch/"
            try:
                body = fetch(url, MAX_INDEX_BYTES)
            except FetchError as exc:
                pages.unreached[f"whl/{variant}"] = str(exc)
                if not exc.reached:
                    for rest in variants[variants.index(variant) + 1 :]:
                        pages.unreached[f"whl/{rest}"] = f"not tried: {WHEEL_INDEX} did not answer for {variant}"
                    break
                continue
            if body is None:
                pages.unreached[f"whl/{variant}"] = f"{url}: not found"
                continue
            pages.index[variant] = index_releases(parse_simple_index(body), variant)
    return pages


def index_variants(rows: dict[str, Any], newest: int = PER_VERSION_MINORS) -> list[str]:
    """The variants of the table's newest rows: the wheel indexes worth reading."""
    keys = sorted(rows, key=Version)[-newest:]
    seen: list[str] = []
    for key in keys:
        for variant in rows[key].get("variants") or {}:
            if variant not in seen:
                seen.append(variant)
    return seen


# ---------------------------------------------------------------------------- the refreshed table


@dataclass
class Change:
    row: str
    what: str  # "field" | "variant" | "row" | "top"
    key: str
    value: Any
    why: str


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # disagreements left for a person


def _same_window(a: dt.datetime | None, b: dt.datetime | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= COMPANION_WINDOW


def companion_for(pages: Pages, project: str, latest: Release) -> tuple[str, str] | None:
    """The companion release published with ``latest`` whose torch requirement admits it."""
    rels = sorted(pages.companions.get(project, {}).values(), key=lambda r: r.version, reverse=True)
    for rel in rels:
        if not _same_window(rel.uploaded, latest.uploaded):
            continue
        spec = torch_spec(requires_of(pages, project, rel))
        if spec is not None and spec.contains(str(latest.version), prereleases=False):
            day = rel.uploaded.date().isoformat() if rel.uploaded else "?"
            return str(
                rel.version
            ), f"{project} {rel.version} published {day} with torch {latest.version}, requires torch{spec}"
    return None


def plan_refresh(table: dict[str, Any], pages: Pages, today: dt.date) -> Plan:
    rows: dict[str, Any] = table["rows"]
    plan = Plan()
    minors = by_minor(pages.torch, min(Version(k) for k in rows))
    newest_keys = list(minors)[-PER_VERSION_MINORS:]
    for key, rels in minors.items():
        latest, first = rels[-1], next((r for r in rels if r.version.micro == 0), rels[0])
        if key in newest_keys or key not in rows:
            requires_of(pages, "torch", latest)
        row = rows.get(key)
        fresh: dict[str, Any] = {"latest": str(latest.version)}
        if first.uploaded:
            fresh["released"] = first.uploaded.strftime("%Y-%m")
        if latest.uploaded:
            fresh["uploaded"] = latest.uploaded.date().isoformat()
        if latest.pythons:
            fresh["python"] = sorted(latest.pythons, key=Version)
        default = cuda_variant_of(latest.requires)
        if default:
            fresh["pypi_default"] = default
        if row is None:
            _plan_new_row(plan, key, fresh, latest, pages, today)
            continue
        for name, value in fresh.items():
            if row.get(name) != value:
                plan.changes.append(Change(key, "field", name, value, f"was {row.get(name)!r} (PyPI)"))
        if fresh["latest"] != row.get("latest") and (row.get("torchvision") or row.get("torchaudio")):
            plan.conflicts.append(
                f"{key}: latest {row.get('latest')} -> {fresh['latest']}: check the torchvision/torchaudio pins (kept)"
            )
        experimental = row.get("python_experimental") or []
        kept = [p for p in experimental if p not in fresh.get("python", [])]
        if kept != experimental:
            plan.changes.append(
                Change(key, "field", "python_experimental", kept or None, "those Pythons have PyPI wheels now")
            )
        for project in COMPANIONS:
            if row.get(project):
                continue
            found = companion_for(pages, project, latest)
            if found:
                plan.changes.append(Change(key, "field", project, found[0], found[1]))
        _plan_variants(plan, key, row, default, pages, today)
    return plan


def _index_lists(pages: Pages, variant: str, key: str) -> list[str]:
    listed = pages.index.get(variant, {})
    return sorted((v for v in listed if minor_of(Version(v)) == key), key=Version)


def _unknown_build(variant: str, source: str) -> dict[str, Any]:
    if variant.startswith("cu"):
        return {"arch": None, "source": source}
    if variant.startswith("rocm"):
        return {"gfx": None, "source": source}
    return {"source": source} if variant != "cpu" else {}


def _plan_variants(
    plan: Plan, key: str, row: dict[str, Any], default: str | None, pages: Pages, today: dt.date
) -> None:
    variants: dict[str, Any] = row.get("variants") or {}
    day = today.isoformat()
    for variant in sorted(set(variants) | set(pages.index)):
        spec = variants.get(variant)
        listed = _index_lists(pages, variant, key) if variant in pages.index else None
        pypi = variant == default
        if spec is None:
            if listed:
                src = f"whl/{variant} lists torch {', '.join(listed)} ({day}); the index states no arch list"
                plan.changes.append(Change(key, "variant", variant, _unknown_build(variant, src), "new on the index"))
            continue
        if not isinstance(spec, dict):
            continue
        if spec.get("lead") and (listed or pypi):
            where = f"whl/{variant} lists torch {', '.join(listed)}" if listed else "the PyPI wheel's CUDA pin"
            new = {k: v for k, v in spec.items() if k != "lead"}
            new["source"] = f"{spec.get('source', '')}; verified: {where} ({day})".lstrip("; ")
            plan.changes.append(Change(key, "variant", variant, new, f"verified by {where}"))
        elif listed == [] and not pypi:
            plan.conflicts.append(f"{key}: {variant} is in the table but whl/{variant} lists no torch {key}.x (kept)")


def _plan_new_row(plan: Plan, key: str, fresh: dict[str, Any], latest: Release, pages: Pages, today: dt.date) -> None:
    row: dict[str, Any] = {
        "latest": fresh["latest"],
        "released": fresh.get("released"),
        "uploaded": fresh.get("uploaded"),
        "python": fresh.get("python", []),
        "pypi_default": fresh.get("pypi_default"),
    }
    for project in COMPANIONS:
        found = companion_for(pages, project, latest)
        row[project] = found[0] if found else None
    variants: dict[str, Any] = {}
    day = today.isoformat()
    for variant in sorted(pages.index):
        listed = _index_lists(pages, variant, key)
        if listed:
            src = f"whl/{variant} lists torch {', '.join(listed)} ({day}); the index states no arch list"
            variants[variant] = _unknown_build(variant, src)
    default = fresh.get("pypi_default")
    if default and default not in variants:
        variants[default] = _unknown_build(
            default, f"the PyPI wheel of torch {latest.version} ({day}); arch list not read"
        )
    row["variants"] = variants
    row["source"] = f"PyPI torch {latest.version} (scripts/refresh_torch_releases.py, {day})"
    row["note"] = "Added by the refresh script: arch lists are unknown until read from the build script or a wheel."
    plan.changes.append(Change(key, "row", key, row, "a release the table does not have"))


# ---------------------------------------------------------------------------- editing the YAML text


def dump(value: Any) -> str:
    """One YAML flow value in the table's own style: "2.14.1", ["3.11", "3.12"], {arch: null}."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(dump(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {dump(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__}")


def _row_span(lines: list[str], key: str) -> tuple[int, int]:
    head = f'  "{key}":'
    start = next((i for i, line in enumerate(lines) if line.rstrip() == head), None)
    if start is None:
        raise ValueError(f"row {key} not found in the table text")
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].startswith("    ")):
        end += 1
    return start, end


_AFTER = {"uploaded": "released", "python_experimental": "python", "torchvision": "pypi_default"}


def _set_field(lines: list[str], key: str, name: str, value: Any) -> None:
    start, end = _row_span(lines, key)
    text = f"    {name}: {dump(value)}"
    for i in range(start + 1, end):
        if re.match(rf"^    {re.escape(name)}:(\s|$)", lines[i]):
            if re.match(r"^    [a-z_]+:\s*[|>]", lines[i]) or (i + 1 < end and lines[i + 1].startswith("      ")):
                raise ValueError(f"row {key}: {name} is a block value; edit it by hand")
            lines[i] = text
            return
    after = _AFTER.get(name)
    at = next((i + 1 for i in range(start + 1, end) if after and lines[i].startswith(f"    {after}:")), None)
    if at is None:
        at = next((i for i in range(start + 1, end) if lines[i].startswith("    variants:")), end)
    lines.insert(at, text)


def _set_variant(lines: list[str], key: str, variant: str, spec: dict[str, Any]) -> None:
    start, end = _row_span(lines, key)
    text = f"      {variant}: {dump(spec)}"
    block = next((i for i in range(start + 1, end) if lines[i].startswith("    variants:")), None)
    if block is None:
        raise ValueError(f"row {key} has no variants block")
    last = block
    for i in range(block + 1, end):
        if not lines[i].startswith("      "):
            break
        last = i
        if lines[i].startswith(f"      {variant}:"):
            if "&" in lines[i] or "*" in lines[i]:
                raise ValueError(f"row {key}: {variant} holds a YAML anchor or alias; edit it by hand")
            lines[i] = text
            return
    lines.insert(last + 1, text)


def _add_row(lines: list[str], key: str, row: dict[str, Any]) -> None:
    out = [f'  "{key}":']
    for name, value in row.items():
        if name == "variants":
            out.append("    variants:")
            out.extend(f"      {v}: {dump(s)}" for v, s in value.items())
        else:
            out.append(f"    {name}: {dump(value)}")
    while lines and not lines[-1].strip():
        lines.pop()
    lines.extend(out)


def _set_top(lines: list[str], name: str, value: Any) -> None:
    for i, line in enumerate(lines):
        if line.startswith(f"{name}:"):
            lines[i] = f"{name}: {dump(value)}"
            return
    raise ValueError(f"no top-level {name} in the table text")


def apply(text: str, table: dict[str, Any], plan: Plan, today: dt.date) -> tuple[str, dict[str, Any]]:
    """The edited text and the data it must read back as."""
    data = copy.deepcopy(table)
    lines = text.splitlines()
    for c in plan.changes:
        if c.what == "field":
            _set_field(lines, c.row, c.key, c.value)
            data["rows"][c.row][c.key] = c.value
        elif c.what == "variant":
            _set_variant(lines, c.row, c.key, c.value)
            data["rows"][c.row].setdefault("variants", {})[c.key] = c.value
        elif c.what == "row":
            _add_row(lines, c.row, c.value)
            data["rows"][c.row] = c.value
    _set_top(lines, "retrieved", today.isoformat())
    data["retrieved"] = today.isoformat()
    new = "\n".join(lines) + "\n"
    back = yaml.safe_load(new)
    if isinstance(back.get("retrieved"), dt.date):
        back["retrieved"] = back["retrieved"].isoformat()
    if back != data:
        raise ValueError("the edited table does not read back as intended; nothing written")
    return new, data


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def refresh(
    table_path: Path, fetch: Fetch, today: dt.date, wheel_index: bool = True, variants: list[str] | None = None
) -> tuple[str, str, Plan, Pages]:
    """(old text, new text, plan, pages) for the table at ``table_path``; writes nothing."""
    text = table_path.read_text(encoding="utf-8")
    table = yaml.safe_load(text)
    if isinstance(table.get("retrieved"), dt.date):
        table["retrieved"] = table["retrieved"].isoformat()
    rows = table["rows"]
    pages = read_pages(rows, fetch, wheel_index, variants or index_variants(rows))
    plan = plan_refresh(table, pages, today)
    new, _ = apply(text, table, plan, today)
    return text, new, plan, pages


def report(plan: Plan, pages: Pages) -> str:
    out = [f"{len(plan.changes)} change(s):"]
    for c in plan.changes:
        shown = c.value if c.what != "row" else f"{c.value['latest']} ({', '.join(c.value['variants'])})"
        out.append(f"  {c.row} {c.key}: {dump(shown) if c.what != 'row' else shown}  [{c.why}]")
    if plan.conflicts:
        out.append("left for a person (not written):")
        out.extend(f"  {c}" for c in plan.conflicts)
    if pages.unreached:
        out.append("not read:")
        out.extend(f"  {k}: {v}" for k, v in pages.unreached.items())
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", type=Path, default=TABLE)
    ap.add_argument("--write", action="store_true", help="write the refreshed table (default: print the diff)")
    ap.add_argument("--from", dest="source", type=Path, help="read recorded copies of the pages from this directory")
    ap.add_argument("--no-wheel-index", action="store_true", help="read PyPI only")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="wheel index to read (repeatable; default: the variants of the table's newest rows)",
    )
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per request")
    ap.add_argument("--today", type=dt.date.fromisoformat, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    fetch = dir_fetch(args.source) if args.source else http_fetch(min(max(args.timeout, 1.0), 120.0))
    today = args.today or dt.datetime.now(dt.timezone.utc).date()
    try:
        old, new, plan, pages = refresh(args.table, fetch, today, not args.no_wheel_index, args.variant or None)
    except (FetchError, ValueError, OSError) as exc:
        print(f"refresh_torch_releases: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(report(plan, pages))
    if args.write:
        write_atomic(args.table, new)
        print(f"wrote {args.table}")
    else:
        diff = difflib.unified_diff(old.splitlines(True), new.splitlines(True), str(args.table), "refreshed")
        sys.stdout.writelines(diff)
    return 0


if __name__ == "__main__":
    sys.exit(main())
