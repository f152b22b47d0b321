"""imexctl: per-job NVIDIA IMEX domains for Slurm (prolog/epilog lifecycle manager)."""

__version__ = "0.2.0"
