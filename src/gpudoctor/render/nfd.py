"""The gate's verdict as a Node Feature Discovery local feature file (``--nfd-features PATH``).

nfd-worker's ``local`` source reads every file in
``/etc/kubernetes/node-feature-discovery/features.d/``: one ``<namespace>/<name>[=<value>]`` a line,
``#`` comments, a ``# +expiry-time=<RFC 3339>`` directive after which the lines that follow are
ignored, at most 64 kB; it ignores dot files, so a file written to ``.name.tmp`` and renamed
(gpudoctor's atomic write) is never read half-written. The namespace ``feature.node.kubernetes.io``
is always allowed by nfd-master (other namespaces can be denied with -deny-label-ns).
Source: NFD customization guide, "Local feature source" and nfd-master's -deny-label-ns
(kubernetes-sigs/node-feature-discovery docs/usage/customization-guide.md and
docs/reference/master-commandline-reference.md, read 2026-12-01).

Labels (values are Kubernetes label values: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends):

    feature.node.kubernetes.io/gpudoctor.gate=go | no-go
    feature.node.kubernetes.io/gpudoctor.gpus=<GPUs NVML lists>
    feature.node.kubernetes.io/gpudoctor.healthy-gpus=<GPUs no blocking finding is about>
    feature.node.kubernetes.io/gpudoctor.blocking=<rule id of the first blocking finding>   (no-go only)

The expiry (``ttl_s`` after the run) removes the labels from the node when the gate stops running,
so a node whose checker died does not stay labelled healthy. Formatting only.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..lazy_re import LazyPattern

PREFIX = "feature.node.kubernetes.io/gpudoctor."
_BAD = LazyPattern(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    value = _BAD.sub("-", text)[:63]
    return value.strip("-_.") or "unknown"


def render(report: Any, ttl_s: int) -> str:
    from .. import __version__

    expiry = datetime.fromtimestamp(int(report.generated_epoch) + int(ttl_s), timezone.utc)
    gpus = report.gpus()
    listed = [g for g in gpus if g["index"] is not None]
    healthy = [g for g in listed if not g["blocking"]]
    lines = [
        f"# written by gpudoctor gate {__version__} at {report.generated_at}",
        "# +expiry-time=" + expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
        f"{PREFIX}gate={report.verdict}",
        f"{PREFIX}gpus={len(listed)}",
        f"{PREFIX}healthy-gpus={len(healthy)}",
    ]
    if report.lines:
        lines.append(f"{PREFIX}blocking={label_value(report.lines[0].rule)}")
    return "\n".join(lines) + "\n"
