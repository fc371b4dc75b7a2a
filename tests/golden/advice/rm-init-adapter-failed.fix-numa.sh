# gpudoctor NUMA binding plan · strategy node · dgx-03 · 7 GPU(s) · 2 NUMA node(s) with CPUs
#   node 0: CPUs 0-55,112-167, 128 GiB
#   node 1: CPUs 56-111,168-223, 128 GiB
# GPUs from NVML; CUDA_VISIBLE_DEVICES is not set: the job sees all 7 GPU(s), cuda:N = GPU N (PCI
#     bus order)
# CPUs this process may use: 0-223 (224 of 224; Cpus_allowed_list ∩ cgroup cpuset)
# note: NVIDIA GPU(s) 0000:bb:00.0 are on the PCI bus but not listed by NVML (not given to this
#     container, or not initialised): not planned
#
# cuda:0 = GPU 0 · 0000:18:00.0 · NVIDIA H100 80GB HBM3 · GPU-d9000000-4e5f-6a7b-8c9d-0e1f2a3b4c00
#   NUMA node 0 (sysfs numa_node) · CPUs 0-55,112-167 (56 cores, 112 threads): all of node 0 ·
#     memory preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:1a:00.0, same PCIe switch); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:1 = GPU 1 · 0000:19:00.0 · NVIDIA H100 80GB HBM3 · GPU-d9000001-4e5f-6a7b-8c9d-0e1f2a3b4c01
#   NUMA node 0 (sysfs numa_node) · CPUs 0-55,112-167 (56 cores, 112 threads): all of node 0 ·
#     memory preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:1a:00.0, same PCIe switch); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:2 = GPU 2 · 0000:3a:00.0 · NVIDIA H100 80GB HBM3 · GPU-d9000002-4e5f-6a7b-8c9d-0e1f2a3b4c02
#   NUMA node 0 (sysfs numa_node) · CPUs 0-55,112-167 (56 cores, 112 threads): all of node 0 ·
#     memory preferred on node 0
#   nearest RDMA NIC: mlx5_1 (0000:3c:00.0, same PCIe switch); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_1 UCX_NET_DEVICES=mlx5_1:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:3 = GPU 3 · 0000:3b:00.0 · NVIDIA H100 80GB HBM3 · GPU-d9000003-4e5f-6a7b-8c9d-0e1f2a3b4c03
#   NUMA node 0 (sysfs numa_node) · CPUs 0-55,112-167 (56 cores, 112 threads): all of node 0 ·
#     memory preferred on node 0
#   nearest RDMA NIC: mlx5_1 (0000:3c:00.0, same PCIe switch); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_1 UCX_NET_DEVICES=mlx5_1:1
numactl --cpunodebind=0 --preferred=0
#
# cuda:4 = GPU 4 · 0000:9a:00.0 · NVIDIA H100 80GB HBM3 · GPU-d9000004-4e5f-6a7b-8c9d-0e1f2a3b4c04
#   NUMA node 1 (sysfs numa_node) · CPUs 56-111,168-223 (56 cores, 112 threads): all of node 1 ·
#     memory preferred on node 1
#   nearest RDMA NIC: mlx5_2 (0000:9c:00.0, same PCIe switch); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_2 UCX_NET_DEVICES=mlx5_2:1
numactl --cpunodebind=1 --preferred=1
#
# cuda:5 = GPU 5 · 0000:9b:00.0 · NVIDIA H100 80GB HBM3 · GPU-d9000005-4e5f-6a7b-8c9d-0e1f2a3b4c05
#   NUMA node 1 (sysfs numa_node) · CPUs 56-111,168-223 (56 cores, 112 threads): all of node 1 ·
#     memory preferred on node 1
#   nearest RDMA NIC: mlx5_2 (0000:9c:00.0, same PCIe switch); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_2 UCX_NET_DEVICES=mlx5_2:1
numactl --cpunodebind=1 --preferred=1
#
# cuda:6 = GPU 6 · 0000:ba:00.0 · NVIDIA H100 80GB HBM3 · GPU-d9000006-4e5f-6a7b-8c9d-0e1f2a3b4c06
#   NUMA node 1 (sysfs numa_node) · CPUs 56-111,168-223 (56 cores, 112 threads): all of node 1 ·
#     memory preferred on node 1
#   nearest RDMA NIC: mlx5_3 (0000:bc:00.0, same PCIe switch); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_3 UCX_NET_DEVICES=mlx5_3:1
numactl --cpunodebind=1 --preferred=1
#
# Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:
#   torchrun --nproc-per-node 7 --no-python -- gpudoctor run --numa -- python train.py
#   srun ... gpudoctor run --numa -- python train.py   (uses SLURM_LOCALID)
