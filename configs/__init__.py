"""The Hydra config tree (installed as ``locomotion.configs``)."""
