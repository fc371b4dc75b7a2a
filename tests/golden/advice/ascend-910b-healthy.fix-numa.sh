# gpudoctor NUMA binding plan · strategy node · npu-node-01 · 0 GPU(s) · 2 NUMA node(s) with CPUs
#   node 0: CPUs 0-15,32-47, 256 GiB
#   node 1: CPUs 16-31,48-63, 256 GiB
# GPUs from sysfs; CUDA_VISIBLE_DEVICES is not set
# CPUs this process may use: 0-63 (64 of 64; Cpus_allowed_list ∩ cgroup cpuset)
# WARNING: no GPU found (NVML, the PCI bus and amdgpu list no NVIDIA or AMD GPU): nothing to bind
# note: non-NVIDIA GPU(s) 0000:42:00.0, 0000:52:00.0, 0000:62:00.0, 0000:72:00.0, 0000:82:00.0,
#     0000:92:00.0, 0000:a2:00.0, 0000:b2:00.0 not planned (CUDA device indices cover NVIDIA GPUs
#     only)
