"""The Ray side of a distributed run, for the learner: the connection, the replay shards and the
actors, the actors' rounds (each started with the latest published weights), their faults, and
the learner's sample requests. Everything here that talks to Ray talks through `ray` core only."""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import math
import sys
import time
from typing import Any

import numpy as np
import torch

from rl_hydra.distributed.actor import Actor
from rl_hydra.distributed.parts import RunParts
from rl_hydra.distributed.replay import SequenceShard, TransitionShard
from rl_hydra.distributed.settings import Settings, actor_epsilons
from rl_hydra.errors import MachineLimit
from rl_hydra.runs.rng import spawn_seeds
from rl_hydra.runs.run_dir import RunError

log = logging.getLogger(__name__)

SAMPLE_BATCHES = 4  # batches per sample request: one Ray round trip serves several updates
RESTART_PATIENCE = 300.0  # seconds an actor may take to come back after a death, before the run stops
RETRY_AFTER = 0.5  # seconds before a round is asked again of an actor that Ray is restarting
ACTOR_SEED_STRIDE = 10_007  # actor i's envs are seeded from seed + (i + 1) * stride: apart from each other's


class ClusterFault(RuntimeError):
    """A replay shard's process died (its data is gone), or an actor more often than Ray restarts it:
    the run stops with the resume command."""


class Cluster:
    def __init__(self, ray: Any, settings: Settings, parts: RunParts, recurrent: bool, prioritized: bool):
        self.ray, self.settings, self.parts = ray, settings, parts
        self.recurrent, self.prioritized = recurrent, prioritized
        self.started_ray = False
        self.shards: list[Any] = []
        self.actors: list[Any] = []
        self.rounds: dict[Any, concurrent.futures.Future] = {}  # each round under way: its ref -> a future of it
        self.round_actor: dict[Any, int] = {}
        self.held: list[int] = []  # actors whose next round waits for the learner
        self.retries: list[tuple[float, int]] = []  # (when, actor): rounds to ask for again
        self.down_since: dict[int, float] = {}  # actors whose last round failed: since when
        self.deaths: collections.Counter[int] = collections.Counter()
        self.restarts = 0
        self.weights: Any = None
        self.version = -1
        self.run_step = 0  # the run's env steps as the learner has counted them: where a round starts

    # --- starting --------------------------------------------------------------------------
    def connect(self) -> None:
        """A local Ray instance sized to the actors, or the cluster at `distributed.address`; inside a
        Ray job already (a sweep on Hydra's Ray launcher), the connection it has."""
        ray, settings = self.ray, self.settings
        if not ray.is_initialized():
            self.start_or_join()
        needed, cpus = settings.actors * settings.cpus_per_actor, ray.cluster_resources().get("CPU", 0)
        if needed > cpus:  # the actors would wait for ever to be placed
            raise MachineLimit(
                f"distributed.actors={settings.actors} x distributed.cpus_per_actor="
                f"{settings.cpus_per_actor:g} needs {needed:g} CPUs but the Ray cluster has {cpus:g}; "
                f"lower distributed.actors or distributed.cpus_per_actor"
            )

    def start_or_join(self) -> None:
        ray, settings = self.ray, self.settings
        # said at once, on stderr: the console holds a launch's log lines until the run has its
        # directory, which is after Ray, and a first start on a small machine takes minutes
        where = (
            f"a local Ray instance with {math.ceil(settings.actors * settings.cpus_per_actor)} CPUs"
            if settings.address is None
            else f"the Ray cluster at {settings.address}"
        )
        print(f"distributed=apex: starting {where} (minutes, the first time on a small machine)", file=sys.stderr)
        ray_log = logging.getLogger("ray")  # its notes at start-up (token authentication, ...) stay off the console
        level = ray_log.level
        ray_log.setLevel(logging.ERROR)
        quiet = {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": False}
        try:
            if settings.address is None:
                ray.init(
                    num_cpus=math.ceil(settings.actors * settings.cpus_per_actor), include_dashboard=False, **quiet
                )
            else:
                ray.init(address=settings.address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise MachineLimit(
                f"distributed.address={settings.address}: cannot join a Ray cluster there "
                f"({str(error).splitlines()[0]})"
            ) from None
        finally:
            ray_log.setLevel(level)
        self.started_ray = True

    def start_replay(self, spaces: dict[str, Any], saved: list[dict] | None) -> None:
        """The replay shards, with their checkpointed contents (`saved`) on a resume."""
        ray, parts = self.ray, self.parts
        shard_class = ray.remote(num_cpus=0, max_restarts=0)(SequenceShard if self.recurrent else TransitionShard)
        buffer_seed = spawn_seeds(parts.seed).buffer  # shard i samples from buffer_seed + i
        for i in range(self.settings.shards):
            if self.recurrent:
                self.shards.append(
                    shard_class.remote(
                        parts.buffer,
                        buffer_seed + i,
                        alpha=self.settings.priority_alpha,
                        beta=self.settings.priority_beta,
                    )
                )
            else:
                self.shards.append(
                    shard_class.remote(
                        parts.buffer, **spaces, gamma=parts.gamma, seed=spawn_seeds(parts.seed).buffer + i
                    )
                )
        for refused in self.call_shards([shard.ready.remote() for shard in self.shards]):
            if refused is not None:  # its buffer, e.g. too large for the memory of the node it is on
                raise MachineLimit(refused)
        if saved is not None:
            if len(saved) != len(self.shards):
                raise RunError(
                    f"the checkpoint holds {len(saved)} replay shards but distributed.shards="
                    f"{len(self.shards)}; resume with the run's own distributed.shards"
                )
            self.call_shards([shard.load_state_dict.remote(state) for shard, state in zip(self.shards, saved)])
        self.requests: list[collections.deque] = [collections.deque() for _ in self.shards]  # samples in flight
        self.drawn: list[collections.deque] = [collections.deque() for _ in self.shards]  # batches not used yet
        self.new_priorities: list[list[tuple[np.ndarray, torch.Tensor]]] = [[] for _ in self.shards]
        self.turn = 0

    def start_actors(self, session: int) -> None:
        """N actors, each on its Ape-X epsilon, seeded apart for each session of the run; each starts a round."""
        ray, parts, settings = self.ray, self.parts, self.settings
        actor_class = ray.remote(
            num_cpus=settings.cpus_per_actor, max_restarts=settings.max_restarts, max_task_retries=0
        )(Actor)
        epsilons = actor_epsilons(settings.actors, settings.epsilon_base, settings.epsilon_alpha)
        for i, epsilon in enumerate(epsilons):  # a restarted actor is built again from these arguments
            seed = parts.seed + (i + 1 + session * settings.actors) * ACTOR_SEED_STRIDE
            self.actors.append(
                actor_class.remote(
                    parts.actor, i, epsilon, seed, settings.send_every, settings.priority_eta, self.prioritized
                )
            )
        for i in range(len(self.actors)):
            self.launch(i)

    def publish(self, weights: dict, version: int) -> None:
        """The learner's weights into the object store, where actors pull them at their next round."""
        self.weights, self.version = self.ray.put(weights), version

    # --- the actors' rounds ----------------------------------------------------------------
    def launch(self, i: int) -> None:
        """Actor i's next round, with the latest published weights (pulled from the object store)."""
        # its shard comes with each round, not at construction: Ray rebuilds a restarted actor from plain arguments
        shard = self.shards[i % len(self.shards)]
        ref = self.actors[i].collect.remote(
            self.weights, self.version, self.settings.weights_every, shard, self.run_step
        )
        self.rounds[ref] = ref.future()
        self.round_actor[ref] = i

    def finished_rounds(self, hold: bool) -> list[dict[str, Any]]:
        """The reports of the rounds that ended since the last call; their actors start the next one
        (or, with `hold`, wait until `release`). An actor that died is retried while Ray restarts it."""
        ray, reports = self.ray, []
        # a Ray future's done() is a flag set by a callback: far cheaper than ray.wait between updates
        for ref in [ref for ref, future in self.rounds.items() if future.done()]:
            del self.rounds[ref]
            i = self.round_actor.pop(ref)
            try:
                reports.append(ray.get(ref))
            except ray.exceptions.RayTaskError as error:
                if isinstance(error.cause, ray.exceptions.RayActorError):  # its shard died under it
                    raise ClusterFault(
                        f"replay shard {i % len(self.shards)} was lost ({type(error.cause).__name__})"
                    ) from None
                raise
            except ray.exceptions.RayActorError as error:
                self.actor_down(i, error)
                continue
            self.down_since.pop(i, None)
            if hold:
                self.held.append(i)
            else:
                self.launch(i)
        now = time.monotonic()
        for retry in [retry for retry in self.retries if retry[0] <= now]:
            self.retries.remove(retry)
            self.launch(retry[1])
        return reports

    def release(self) -> None:
        """The held actors start their next rounds."""
        for i in self.held:
            self.launch(i)
        self.held = []

    def wait(self, timeout: float) -> None:
        """Until a round ends, or `timeout` seconds."""
        if self.rounds:
            concurrent.futures.wait(self.rounds.values(), timeout=timeout, return_when="FIRST_COMPLETED")
        else:
            time.sleep(timeout)

    def actor_down(self, i: int, error: Exception) -> None:
        """Actor i's round failed: it died (counted and logged once), or Ray is still restarting it
        (its next round is asked for again shortly)."""
        now = time.monotonic()
        if i not in self.down_since:
            self.down_since[i] = now
            self.deaths[i] += 1
            self.restarts += 1
            if self.deaths[i] > self.settings.max_restarts:
                raise ClusterFault(
                    f"actor {i} died {self.deaths[i]} times, more than distributed.max_restarts="
                    f"{self.settings.max_restarts}"
                )
            log.warning(
                "actor %d died (%s); Ray restarts it (%d of distributed.max_restarts=%d) and the run goes on",
                i,
                type(error).__name__,
                self.deaths[i],
                self.settings.max_restarts,
            )
        elif now - self.down_since[i] > RESTART_PATIENCE:
            raise ClusterFault(f"actor {i} did not come back within {RESTART_PATIENCE:.0f} s of its death")
        self.retries.append((now + RETRY_AFTER, i))

    # --- the replay shards -----------------------------------------------------------------
    def sample(self, batch_size: int) -> tuple[int, Any] | None:
        """(its shard, a sampled batch), taking turns over the shards, or None while they hold too
        little. Each shard has sample requests in flight; the new priorities of its batches go with
        the request that replaces one (one call)."""
        i = self.turn % len(self.shards)
        self.turn += 1
        if self.drawn[i]:
            return i, self.drawn[i].popleft()
        shard, queue = self.shards[i], self.requests[i]
        if self.new_priorities[i]:
            rows_parts, priority_parts = zip(*self.new_priorities[i])
            # one copy to the host for all the batches since the last request: on a GPU, one sync, not one per update
            shard.update_priorities.remote(np.concatenate(rows_parts), torch.cat(priority_parts).cpu().numpy())
            self.new_priorities[i] = []
        while len(queue) < self.settings.prefetch + 1:
            queue.append(shard.sample.remote(batch_size, SAMPLE_BATCHES))
        batches = self.call_shards(queue.popleft(), i)
        if batches is None:
            return None
        self.drawn[i].extend(batches[1:])
        return i, batches[0]

    def send_priorities(self, i: int, rows: np.ndarray, priorities: torch.Tensor) -> None:
        """New priorities for rows of shard i (a tensor on the learner's device), sent with its next
        sample request."""
        self.new_priorities[i].append((rows, priorities))

    def replay_states(self) -> list[dict[str, Any]]:
        return self.call_shards([shard.state_dict.remote() for shard in self.shards])

    def call_shards(self, refs: Any, shard: int | None = None) -> Any:
        """ray.get of shard calls; a lost shard stops the run."""
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayActorError as error:
            which = "a replay shard" if shard is None else f"replay shard {shard}"
            raise ClusterFault(f"{which} was lost ({type(error).__name__})") from None

    # --- the record and the end ------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        """What provenance.json records of the cluster."""
        nodes = sorted(
            {
                node.get("NodeManagerHostname") or node.get("NodeManagerAddress")
                for node in self.ray.nodes()
                if node.get("Alive")
            }
        )
        return {
            "kind": "apex",
            "ray": self.ray.__version__,
            "address": self.settings.address or "local",
            "nodes": nodes,
            "actors": len(self.actors),
            "cpus_per_actor": self.settings.cpus_per_actor,
            "shards": len(self.shards),
        }

    def shutdown(self) -> None:
        """End the actors and shards (and the local Ray instance this run started)."""
        ray = self.ray
        if not ray.is_initialized():
            return
        for handle in [*self.actors, *self.shards]:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.started_ray:
            ray.shutdown()
