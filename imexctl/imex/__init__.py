"""The IMEX daemon: config rendering, launching and the nvidia-imex-ctl client."""
