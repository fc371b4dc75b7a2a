# gpudoctor NUMA binding plan · strategy node · ws-radeon-01 · 1 GPU(s) · 2 NUMA node(s) with CPUs
#   node 0: CPUs 0-15,32-47, 256 GiB
#   node 1: CPUs 16-31,48-63, 256 GiB
# GPUs from sysfs; CUDA_VISIBLE_DEVICES is not set: the job sees all 1 GPU(s), cuda:N = GPU N (PCI
#     bus order)
# CPUs this process may use: 0-63 (64 of 64; Cpus_allowed_list ∩ cgroup cpuset)
# note: AMD GPUs from amdgpu's sysfs, numbered in KFD topology order as ROCm numbers them
#     (HIP_VISIBLE_DEVICES; HIP also honours CUDA_VISIBLE_DEVICES)
# note: numactl was not found on this machine's PATH: install it (apt-get install numactl, dnf
#     install numactl) to use these lines, or bind with `gpudoctor run --numa`, which falls back to
#     the process's own CPU affinity and memory policy
#
# cuda:0 = GPU 0 · 0000:c3:00.0 · AMD Radeon PRO W7900
#   NUMA node 1 (sysfs numa_node) · CPUs 16-31,48-63 (16 cores, 32 threads): all of node 1 · memory
#     preferred on node 1
#   nearest RDMA NIC: mlx5_0 (0000:19:00.0, another NUMA node); if NCCL or UCX pick another:
#     NCCL_IB_HCA==mlx5_0 UCX_NET_DEVICES=mlx5_0:1
numactl --cpunodebind=1 --preferred=1
#
# Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:
#   torchrun --nproc-per-node 1 --no-python -- gpudoctor run --numa -- python train.py
#   srun ... gpudoctor run --numa -- python train.py   (uses SLURM_LOCALID)
