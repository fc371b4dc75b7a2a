# gpudoctor NUMA binding plan · strategy node · mi300x-node-01 · 8 GPU(s) · 2 NUMA node(s) with CPUs
#   node 0: CPUs 0-15,32-47, 256 GiB
#   node 1: CPUs 16-31,48-63, 256 GiB
# GPUs from sysfs; CUDA_VISIBLE_DEVICES is not set: the job sees all 8 GPU(s), cuda:N = GPU N (PCI
#     bus order)
# CPUs this process may use: 0-63 (64 of 64; Cpus_allowed_list ∩ cgroup cpuset)
# note: AMD GPUs from amdgpu's sysfs, numbered in KFD topology order as ROCm numbers them
#     (HIP_VISIBLE_DEVICES; HIP also honours CUDA_VISIBLE_DEVICES)
# note: numactl was not found on this machine's PATH: install it (apt-get install numactl, dnf
#     install numactl) to use these lines, or bind with `gpudoctor run --numa`, which falls back to
#     the process's own CPU affinity and memory policy
#
# cuda:0 = GPU 0 · 0000:15:00.0 · AMD Instinct MI300X OAM
#   NUMA node 0 (sysfs numa_node) · CPUs 0-15,32-47 (16 cores, 32 threads): all of node 0 · memory
#     preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, same NUMA node, different host bridge); if NCCL or UCX
#     pick another: NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:1 = GPU 1 · 0000:35:00.0 · AMD Instinct MI300X OAM
#   NUMA node 0 (sysfs numa_node) · CPUs 0-15,32-47 (16 cores, 32 threads): all of node 0 · memory
#     preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, same NUMA node, different host bridge); if NCCL or UCX
#     pick another: NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:2 = GPU 2 · 0000:55:00.0 · AMD Instinct MI300X OAM
#   NUMA node 0 (sysfs numa_node) · CPUs 0-15,32-47 (16 cores, 32 threads): all of node 0 · memory
#     preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, same NUMA node, different host bridge); if NCCL or UCX
#     pick another: NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:3 = GPU 3 · 0000:75:00.0 · AMD Instinct MI300X OAM
#   NUMA node 0 (sysfs numa_node) · CPUs 0-15,32-47 (16 cores, 32 threads): all of node 0 · memory
#     preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, same NUMA node, different host bridge); if NCCL or UCX
#     pick another: NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:4 = GPU 4 · 0000:95:00.0 · AMD Instinct MI300X OAM
#   NUMA node 1 (sysfs numa_node) · CPUs 16-31,48-63 (16 cores, 32 threads): all of node 1 · memory
#     preferred on node 1
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, another NUMA node); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=1 --preferred=1
#
# cuda:5 = GPU 5 · 0000:b5:00.0 · AMD Instinct MI300X OAM
#   NUMA node 1 (sysfs numa_node) · CPUs 16-31,48-63 (16 cores, 32 threads): all of node 1 · memory
#     preferred on node 1
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, another NUMA node); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=1 --preferred=1
#
# cuda:6 = GPU 6 · 0000:d5:00.0 · AMD Instinct MI300X OAM
#   NUMA node 1 (sysfs numa_node) · CPUs 16-31,48-63 (16 cores, 32 threads): all of node 1 · memory
#     preferred on node 1
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, another NUMA node); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=1 --preferred=1
#
# cuda:7 = GPU 7 · 0000:f5:00.0 · AMD Instinct MI300X OAM
#   NUMA node 1 (sysfs numa_node) · CPUs 16-31,48-63 (16 cores, 32 threads): all of node 1 · memory
#     preferred on node 1
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, another NUMA node); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=1 --preferred=1
#
# Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:
#   torchrun --nproc-per-node 8 --no-python -- gpudoctor run --numa -- python train.py
#   srun ... gpudoctor run --numa -- python train.py   (uses SLURM_LOCALID)
