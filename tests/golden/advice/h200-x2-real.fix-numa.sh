# gpudoctor NUMA binding plan · strategy node · gpu-host · 2 GPU(s) · 1 NUMA node(s) with CPUs
#   node 0: CPUs 0-31, 6 GiB
# GPUs from NVML; CUDA_VISIBLE_DEVICES is not set: the job sees all 2 GPU(s), cuda:N = GPU N (PCI
#     bus order)
# CPUs this process may use: 0-31 (32 of 32; Cpus_allowed_list ∩ cgroup cpuset)
# note: one NUMA node: memory is local whatever the binding, and --strategy node only keeps ranks on
#     the allowed CPUs; --strategy exclusive or core-complex gives each rank cores of its own
# note: numactl was not found on this machine's PATH: install it (apt-get install numactl, dnf
#     install numactl) to use these lines, or bind with `gpudoctor run --numa`, which falls back to
#     the process's own CPU affinity and memory policy
# note: in a container, --preferred/--membind need CAP_SYS_NICE under Docker's and containerd's
#     default seccomp profiles; without it numactl stops with 'set_mempolicy: Operation not
#     permitted' and runs nothing: drop the memory option there, or use `gpudoctor run --numa`,
#     which checks first
#
# cuda:0 = GPU 0 · 0000:00:06.0 · NVIDIA H200 · GPU-00000000-0000-0000-0000-000000000000
#   NUMA node 0 (NVML memory affinity; sysfs numa_node is -1) · CPUs 0-31 (32 cores, 32 threads):
#     all of node 0 · memory preferred on node 0
numactl --cpunodebind=0 --preferred=0
#
# cuda:1 = GPU 1 · 0000:00:07.0 · NVIDIA H200 · GPU-00000000-0000-0000-0000-000000000001
#   NUMA node 0 (NVML memory affinity; sysfs numa_node is -1) · CPUs 0-31 (32 cores, 32 threads):
#     all of node 0 · memory preferred on node 0
numactl --cpunodebind=0 --preferred=0
#
# Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:
#   torchrun --nproc-per-node 2 --no-python -- gpudoctor run --numa -- python train.py
#   srun ... gpudoctor run --numa -- python train.py   (uses SLURM_LOCALID)
