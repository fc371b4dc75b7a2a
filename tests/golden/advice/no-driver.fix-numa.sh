# gpudoctor NUMA binding plan · strategy node · workstation-01 · 1 GPU(s) · 1 NUMA node(s) with CPUs
#   node 0: CPUs 0-7, 64 GiB
# GPUs from sysfs; CUDA_VISIBLE_DEVICES is not set: the job sees all 1 GPU(s), cuda:N = GPU N (PCI
#     bus order)
# CPUs this process may use: 0-7 (8 of 8; Cpus_allowed_list ∩ cgroup cpuset)
# note: NVML unavailable (driver_not_loaded): GPUs taken from the PCI bus and numbered in bus order,
#     as NVML and CUDA (with CUDA_DEVICE_ORDER=PCI_BUS_ID) number them; in a container sysfs may
#     list GPUs that were not given to it
# note: one NUMA node: memory is local whatever the binding, and --strategy node only keeps ranks on
#     the allowed CPUs; --strategy exclusive or core-complex gives each rank cores of its own
# note: numactl was not found on this machine's PATH: install it (apt-get install numactl, dnf
#     install numactl) to use these lines, or bind with `gpudoctor run --numa`, which falls back to
#     the process's own CPU affinity and memory policy
#
# cuda:0 = GPU 0 · 0000:01:00.0
#   NUMA node 0 (sysfs numa_node) · CPUs 0-7 (8 cores, 8 threads): all of node 0 · memory preferred
#     on node 0
numactl --cpunodebind=0 --preferred=0
#
# Prefix each GPU's process with its line, or let gpudoctor bind each rank of a launcher:
#   torchrun --nproc-per-node 1 --no-python -- gpudoctor run --numa -- python train.py
#   srun ... gpudoctor run --numa -- python train.py   (uses SLURM_LOCALID)
