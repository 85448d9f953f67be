"""What the monitor samples each tick, by what it watches: ``gpu`` (NVML, GPM, the GPUs' processes and energy),
``host`` (CPU, memory, cores, disks, the training processes and their threads, the monitor's own cost), ``pyspy``
(Python stacks from outside the process) and ``discovery`` (trainings found without an agent, measured by sampling).
``base`` is what every source is. What the agents send comes in through ``trainmon.ingest``, not here."""
