"""rl-hydra's config schema in Hydra's ConfigStore wherever Hydra runs: Hydra imports the modules
of the `hydra_plugins` namespace before it composes, so the group files' `/schema/...` entries
are found by any Hydra app or compose call over rl-hydra's conf/, whether or not it imported rl_hydra."""

from rl_hydra.schema import register_schemas

register_schemas()
