from rl_hydra.envs.make import make_env

__all__ = ["make_env"]
