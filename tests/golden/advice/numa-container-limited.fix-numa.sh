# gpudoctor NUMA binding plan · strategy node · trainer-7f9c4-0 · 2 GPU(s) · 2 NUMA node(s) with
#     CPUs
#   node 0: CPUs 0-15, 128 GiB
#   node 1: CPUs 16-31, 128 GiB
# GPUs from NVML; CUDA_VISIBLE_DEVICES is not set: the job sees all 2 GPU(s), cuda:N = GPU N (PCI
#     bus order)
# CPUs this process may use: 2-9 (8 of 32; Cpus_allowed_list ∩ cgroup cpuset)
# note: NVIDIA GPU(s) 0000:17:00.0, 0000:ca:00.0 are on the PCI bus but not listed by NVML (not
#     given to this container, or not initialised): not planned
# note: numactl was not found on this machine's PATH: install it (apt-get install numactl, dnf
#     install numactl) to use these lines, or bind with `gpudoctor run --numa`, which falls back to
#     the process's own CPU affinity and memory policy
# note: in a container, --preferred/--membind need CAP_SYS_NICE under Docker's and containerd's
#     default seccomp profiles; without it numactl stops with 'set_mempolicy: Operation not
#     permitted' and runs nothing: drop the memory option there, or use `gpudoctor run --numa`,
#     which checks first
#
# cuda:0 = GPU 0 · 0000:31:00.0 · NVIDIA A100 80GB PCIe · GPU-a1000000-4e5f-6a7b-8c9d-0e1f2a3b4c00
#   NUMA node 0 (sysfs numa_node) · CPUs 2-9 (8 cores, 8 threads): the allowed CPUs of node 0, 8 of
#     16 · memory preferred on node 0
numactl --physcpubind=2-9 --preferred=0
#
# cuda:1 = GPU 1 · 0000:b1:00.0 · NVIDIA A100 80GB PCIe · GPU-a1000001-4e5f-6a7b-8c9d-0e1f2a3b4c01
#   NUMA node 1 (sysfs numa_node)
#   WARNING: GPU 1 (0000:b1:00.0) is on NUMA node 1 (its CPUs 16-31), but this process may only use
#     CPUs 2-9 (Cpus_allowed_list ∩ cgroup cpuset): none is near this GPU, so no binding is given.
#     Ask for CPUs on node 1: Slurm srun --gpu-bind=closest or --cpu-bind=ldoms; Kubernetes topology
#     manager policy single-numa-node; or widen the taskset/cpuset
#   (no binding for this GPU)
#
# Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:
#   torchrun --nproc-per-node 2 --no-python -- gpudoctor run --numa -- python train.py
#   srun ... gpudoctor run --numa -- python train.py   (uses SLURM_LOCALID)
