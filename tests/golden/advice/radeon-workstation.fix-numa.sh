# gpudoctor NUMA binding plan · strategy node · ws-radeon-01 · 0 GPU(s) · 2 NUMA node(s) with CPUs
#   node 0: CPUs 0-15,32-47, 256 GiB
#   node 1: CPUs 16-31,48-63, 256 GiB
# GPUs from sysfs; CUDA_VISIBLE_DEVICES is not set
# CPUs this process may use: 0-63 (64 of 64; Cpus_allowed_list ∩ cgroup cpuset)
# WARNING: no NVIDIA GPU found (neither NVML nor the PCI bus lists one): nothing to bind
# note: non-NVIDIA GPU(s) 0000:c3:00.0 not planned (CUDA device indices cover NVIDIA GPUs only)
