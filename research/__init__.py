"""The studies that decided the package's defaults: their drivers, analysis tools, configs,
tests and raw results. Not installed with the package; run the drivers from the repository
root as modules, e.g. ``python -m research.stagger_study``. See research/README.md."""
