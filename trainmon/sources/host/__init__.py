"""What the host and the training processes do: CPU, memory, swap, the cores a process may use (affinity, cgroup
quota), block devices, and the process tree (mains, DataLoader workers, ranks) with their thread states and what their
blocked threads wait on; and what watching costs the monitor itself."""
