"""The Kubernetes DaemonSet: it parses, runs the gate periodically, writes NFD's feature directory,
and does not take GPUs away from jobs."""

from __future__ import annotations

import yaml

from tests.conftest import REPO

MANIFEST = REPO / "scripts" / "k8s" / "daemonset.yaml"
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"


def documents():
    return {d["kind"]: d for d in yaml.safe_load_all(MANIFEST.read_text())}


def test_manifest_runs_the_gate_into_nfd_feature_files():
    docs = documents()
    assert set(docs) == {"Namespace", "ConfigMap", "DaemonSet"}
    spec = docs["DaemonSet"]["spec"]["template"]["spec"]
    [container] = spec["containers"]
    script = " ".join(container["command"] + container["args"])
    assert "gpudoctor gate" in script and f"--nfd-features {FEATURES_D}/gpudoctor" in script
    assert "sleep 300" in script and "--policy /etc/gpudoctor/policy.yaml" in script
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["nfd-features"] == FEATURES_D and volumes["nfd-features"]["hostPath"]["path"] == FEATURES_D
    assert "policy.yaml" in docs["ConfigMap"]["data"]


def test_manifest_does_not_request_gpus_and_targets_gpu_nodes():
    spec = documents()["DaemonSet"]["spec"]["template"]["spec"]
    resources = spec["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in str(resources)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys and "feature.node.kubernetes.io/pci-10de.present" in keys


def test_the_policy_in_the_configmap_is_valid():
    from gpudoctor.preflight.policy import policy_from_mapping

    text = documents()["ConfigMap"]["data"]["policy.yaml"]
    policy = policy_from_mapping(yaml.safe_load(text), "configmap")
    assert policy.fail_closed and policy.deadline_s == 60
