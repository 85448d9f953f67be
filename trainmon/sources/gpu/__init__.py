"""What the GPUs do: NVML (and GPM on Hopper and newer) sampled into series, the processes using each GPU, and
their energy. The only part of trainmon that talks to the pynvml binding (``nvml.py``)."""
