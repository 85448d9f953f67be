"""trainmon: live monitor that names what starves the GPU in PyTorch training."""

__version__ = "0.1.0"
