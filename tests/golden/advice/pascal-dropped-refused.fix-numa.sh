# gpudoctor NUMA binding plan · strategy node · gpu-node-01 · 1 GPU(s) · 2 NUMA node(s) with CPUs
#   node 0: CPUs 0-15,32-47, 256 GiB
#   node 1: CPUs 16-31,48-63, 256 GiB
# GPUs from NVML; CUDA_VISIBLE_DEVICES is not set: the job sees all 1 GPU(s), cuda:N = GPU N (PCI
#     bus order)
# CPUs this process may use: 0-63 (64 of 64; Cpus_allowed_list ∩ cgroup cpuset)
# note: NVIDIA GPU(s) 0000:9a:00.0 are on the PCI bus but not listed by NVML (not given to this
#     container, or not initialised): not planned
#
# cuda:0 = GPU 0 · 0000:18:00.0 · NVIDIA H100 80GB HBM3 · GPU-00000000-0000-0000-0000-000000000000
#   NUMA node 0 (sysfs numa_node) · CPUs 0-15,32-47 (16 cores, 32 threads): all of node 0 · memory
#     preferred on node 0
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, same PCIe switch); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=0 --preferred=0
#
# Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:
#   torchrun --nproc-per-node 1 --no-python -- gpudoctor run --numa -- python train.py
#   srun ... gpudoctor run --numa -- python train.py   (uses SLURM_LOCALID)
