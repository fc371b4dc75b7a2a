# gpudoctor NUMA binding plan · strategy node · gpu-vm-4 · 4 GPU(s) · 2 NUMA node(s) with CPUs
#   node 0: CPUs 0-11,24-35, 128 GiB
#   node 1: CPUs 12-23,36-47, 128 GiB
# GPUs from NVML; CUDA_VISIBLE_DEVICES is not set: the job sees all 4 GPU(s), cuda:N = GPU N (PCI
#     bus order)
# CPUs this process may use: 0-47 (48 of 48; Cpus_allowed_list ∩ cgroup cpuset)
#
# cuda:0 = GPU 0 · 0000:00:05.0 · NVIDIA H100 80GB HBM3 · GPU-7e000000-4e5f-6a7b-8c9d-0e1f2a3b4c00
#   NUMA node unknown (sysfs numa_node is -1 and NVML names no single node)
#   WARNING: GPU 0 (0000:00:05.0): NUMA node unknown (sysfs numa_node is -1 and NVML names no single
#     node) on a 2-node machine: no binding is given rather than a guess; see `nvidia-smi topo -m`
#     (CPU Affinity) and the BIOS ACPI/SRAT settings
#   (no binding for this GPU)
#
# cuda:1 = GPU 1 · 0000:00:06.0 · NVIDIA H100 80GB HBM3 · GPU-7e000001-4e5f-6a7b-8c9d-0e1f2a3b4c01
#   NUMA node unknown (sysfs numa_node is -1 and NVML names no single node)
#   WARNING: GPU 1 (0000:00:06.0): NUMA node unknown (sysfs numa_node is -1 and NVML names no single
#     node) on a 2-node machine: no binding is given rather than a guess; see `nvidia-smi topo -m`
#     (CPU Affinity) and the BIOS ACPI/SRAT settings
#   (no binding for this GPU)
#
# cuda:2 = GPU 2 · 0000:00:07.0 · NVIDIA H100 80GB HBM3 · GPU-7e000002-4e5f-6a7b-8c9d-0e1f2a3b4c02
#   NUMA node unknown (sysfs numa_node is -1 and NVML names no single node)
#   WARNING: GPU 2 (0000:00:07.0): NUMA node unknown (sysfs numa_node is -1 and NVML names no single
#     node) on a 2-node machine: no binding is given rather than a guess; see `nvidia-smi topo -m`
#     (CPU Affinity) and the BIOS ACPI/SRAT settings
#   (no binding for this GPU)
#
# cuda:3 = GPU 3 · 0000:00:08.0 · NVIDIA H100 80GB HBM3 · GPU-7e000003-4e5f-6a7b-8c9d-0e1f2a3b4c03
#   NUMA node unknown (sysfs numa_node is -1 and NVML names no single node)
#   WARNING: GPU 3 (0000:00:08.0): NUMA node unknown (sysfs numa_node is -1 and NVML names no single
#     node) on a 2-node machine: no binding is given rather than a guess; see `nvidia-smi topo -m`
#     (CPU Affinity) and the BIOS ACPI/SRAT settings
#   (no binding for this GPU)
