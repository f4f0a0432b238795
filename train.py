"""Train an off-policy agent: python train.py algo=iqn env=cartpole [key=value ...]"""

import sys

import hydra
from omegaconf import DictConfig

from rl_hydra.cli import check_group_choices, hydra_task


@hydra.main(config_path="conf", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float:
    return hydra_task(cfg)


if __name__ == "__main__":
    check_group_choices(sys.argv[1:])
    main()
