# gpudoctor NUMA binding plan · strategy node · ws-4l40s · 4 GPU(s) · 1 NUMA node(s) with CPUs
#   node 0: CPUs 0-63, 256 GiB
# GPUs from NVML; CUDA_VISIBLE_DEVICES is not set: the job sees all 4 GPU(s), cuda:N = GPU N (PCI
#     bus order)
# CPUs this process may use: 0-63 (64 of 64; Cpus_allowed_list ∩ cgroup cpuset)
# note: one NUMA node: memory is local whatever the binding, and --strategy node only keeps ranks on
#     the allowed CPUs; --strategy exclusive or core-complex gives each rank cores of its own
#
# cuda:0 = GPU 0 · 0000:01:00.0 · NVIDIA L40S · GPU-4cc00000-4e5f-6a7b-8c9d-0e1f2a3b4c00
#   NUMA node 0 (sysfs numa_node) · CPUs 0-63 (32 cores, 64 threads): all of node 0 · memory
#     preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:82:00.0, same NUMA node, different host bridge); if NCCL or UCX
#     pick another: NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:1 = GPU 1 · 0000:41:00.0 · NVIDIA L40S · GPU-4cc00001-4e5f-6a7b-8c9d-0e1f2a3b4c01
#   NUMA node 0 (sysfs numa_node) · CPUs 0-63 (32 cores, 64 threads): all of node 0 · memory
#     preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:82:00.0, same NUMA node, different host bridge); if NCCL or UCX
#     pick another: NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:2 = GPU 2 · 0000:81:00.0 · NVIDIA L40S · GPU-4cc00002-4e5f-6a7b-8c9d-0e1f2a3b4c02
#   NUMA node 0 (sysfs numa_node) · CPUs 0-63 (32 cores, 64 threads): all of node 0 · memory
#     preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:82:00.0, same PCIe host bridge); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:3 = GPU 3 · 0000:c1:00.0 · NVIDIA L40S · GPU-4cc00003-4e5f-6a7b-8c9d-0e1f2a3b4c03
#   NUMA node 0 (sysfs numa_node) · CPUs 0-63 (32 cores, 64 threads): all of node 0 · memory
#     preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:82:00.0, same NUMA node, different host bridge); if NCCL or UCX
#     pick another: NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:
#   torchrun --nproc-per-node 4 --no-python -- gpudoctor run --numa -- python train.py
#   srun ... gpudoctor run --numa -- python train.py   (uses SLURM_LOCALID)
