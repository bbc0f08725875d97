"""Deployment export: ONNX/TorchScript policies with a JSON sidecar and the robot's MJCF."""

from locomotion.export.policy_export import (
    ExportError,
    ExportResult,
    default_export_dir,
    export_checkpoint,
    missing_export_packages,
)

__all__ = ["ExportError", "ExportResult", "default_export_dir", "export_checkpoint",
           "missing_export_packages"]
