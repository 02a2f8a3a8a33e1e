"""Which label names a third-party sample's node, and which values are no node at all.

The precedence, per source (docs/telegraf.md, "Which name is the node"):

- Telegraf's `nvidia_smi` and `infiniband` inputs: the `host` tag, the only name they carry.
- Telegraf's `prometheus` input scraping dcgm-exporter: the labels of `ingest.node_name_from`
  in order, by default Telegraf's `host` first and dcgm-exporter's `Hostname` second.
- dcgm-exporter scraped by this service (collectors/dcgm): the collector's `host` option, else
  the page's `Hostname` label.

A value that is the pod name of a known exporter's DaemonSet is skipped wherever it stands: under
the GPU operator without NODE_NAME, dcgm-exporter's `Hostname` is its own pod name
(`nvidia-dcgm-exporter-7x2kq`), and Telegraf's `host` in a pod is Telegraf's. A sample left with
no other name is refused with the reason, never stored as a node.

A DaemonSet's pods are named by the API server from generateName `<daemonset>-`: the base (cut
to 58 characters) plus 5 characters of `bcdfghjklmnpqrstvwxz2456789`, lower-case consonants and
digits without 0, 1 and 3 (Kubernetes: staging/src/k8s.io/apiserver/pkg/storage/names/
generate.go `SimpleNameGenerator`, randomLength = 5, MaxGeneratedNameLength = 58; staging/src/
k8s.io/apimachinery/pkg/util/rand/rand.go `alphanums`). Only known exporters' DaemonSet names are
matched, so a node really named `gpu-node-b7k2x` stays a node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

# Telegraf's own tag first: on a node it is the node's hostname (or `[agent] hostname`), while
# dcgm-exporter's Hostname is a pod name wherever NODE_NAME is not passed to it.
DEFAULT_ORDER: tuple[str, ...] = ("host", "Hostname")

# kube's generateName suffix alphabet and length (module docstring).
POD_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
POD_SUFFIX_LENGTH = 5
# DaemonSets of the exporters that name nodes: dcgm-exporter as the GPU operator
# (`nvidia-dcgm-exporter`) and its Helm chart (`<release>-dcgm-exporter`, `dcgm-exporter`)
# deploy it, and Telegraf's (`telegraf`, the telegraf-ds chart's `<release>-telegraf-ds`).
KNOWN_DAEMONSETS = ("dcgm-exporter", "telegraf", "telegraf-ds")
_POD = re.compile(
    r"((?:[a-z0-9][a-z0-9.-]*-)?(?:" + "|".join(map(re.escape, KNOWN_DAEMONSETS)) + r"))"
    + f"-[{POD_SUFFIX_ALPHABET}]{{{POD_SUFFIX_LENGTH}}}")


def exporter_pod(name: str) -> str | None:
    """The DaemonSet whose pod `name` is, when it is a known exporter's pod name; else None."""
    m = _POD.fullmatch(name)
    return None if m is None else m.group(1)


def pod_reason(label: str, name: str) -> str | None:
    """Why `name` (the value of `label`) cannot name a node, or None when it can."""
    ds = exporter_pod(name)
    if ds is None:
        return None
    return (f"{label}={name} is a pod name of the {ds} DaemonSet, not a node name: give the "
            f"exporter its node's name (dcgm-exporter: NODE_NAME; Telegraf: [agent] hostname)")


def pick(tags: Mapping[str, str], order: Sequence[str]) -> tuple[str | None, str | None]:
    """The node name of a sample with these tags: the first label of `order` present with a
    value that is not a pod name. Gives (name, None); (None, why) when every name present was
    a pod name; (None, None) when the sample names no node at all."""
    why: str | None = None
    for label in order:
        v = tags.get(label)
        if not v:
            continue
        bad = pod_reason(label, v)
        if bad is None:
            return v, None
        why = why or bad
    return None, why
