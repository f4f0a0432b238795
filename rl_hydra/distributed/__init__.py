"""Distributed runs (`distributed=apex`): Ape-X actors and replay shards on Ray, one learner here
(learner.py, which rl_hydra.training.run hands such a run); with algo=drqn, R2D2. docs/distributed.md.
Ray is imported only when a run asks for it."""
