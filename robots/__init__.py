"""Robot models (MJCF) and their specs; one folder per robot."""

from pathlib import Path

ROBOTS_DIR = Path(__file__).resolve().parent
