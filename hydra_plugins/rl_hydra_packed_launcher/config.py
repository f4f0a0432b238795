"""The packed launcher's config (`hydra/launcher=packed`): docs/sweeps.md."""

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class PackedLauncherConf:
    _target_: str = "hydra_plugins.rl_hydra_packed_launcher.packed_launcher.PackedLauncher"
    pack_size: int | None = None  # members a pack at most; null: every job of a group in one pack
    n_jobs: int = 1  # packs trained at once, each in a process of its own (1 with via=local: in this process)
    via: str = "local"  # where a pack trains: local | submitit_local | submitit_slurm | ray (one job a pack)
    executor: dict[str, Any] = field(default_factory=dict)  # via's parameters: submitit's, or a Ray task's options


ConfigStore.instance().store(group="hydra/launcher", name="packed", node=PackedLauncherConf, provider="rl_hydra")
