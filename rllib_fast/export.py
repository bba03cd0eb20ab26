"""``rllib_fast.export``: the public names of policy export (``rllib-fast export``,
docs/deploy.md). The implementation is :mod:`rllib_fast.core.export`, which every
algorithm's checkpoint and ``export_policy`` use."""
from .core.export import (FORMATS, MODULE_PATH, POLICY_FORMAT, POLICY_INFO_FILE, ExportError,  # noqa: F401
                          export_checkpoint, export_module, export_policy, load_policy_module,
                          save_policy_module)

__all__ = ["FORMATS", "MODULE_PATH", "POLICY_FORMAT", "POLICY_INFO_FILE", "ExportError", "export_checkpoint",
           "export_module", "export_policy", "load_policy_module", "save_policy_module"]
