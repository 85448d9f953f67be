"""Trainings the monitor finds on its own: PyTorch processes found in /proc (grouped into jobs, ranks and workers)
and made runs measured by sampling until an agent reports them."""
