"""Record a greedy episode of a loaded run as an animated GIF (Pillow; rendering needs pygame)."""

from __future__ import annotations

import os
from pathlib import Path

from rl_hydra.envs import make_env
from rl_hydra.runs.run_dir import RunError


def record_gif(run, path: Path, seed: int = 0, max_frames: int = 1000, fps: int = 30) -> Path:
    # offscreen rendering: keep SDL from looking for a display or a sound card
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    try:
        import pygame  # noqa: F401  (gymnasium's classic-control renderer)
        from PIL import Image
    except ImportError as error:
        raise RunError(f"video=true needs {error.name}: pip install 'rl-hydra[video]'") from None
    env = make_env(run.cfg.env, seed=seed, num_envs=1, render_mode="rgb_array")
    try:
        obs, _ = env.reset(seed=[seed])
        frames, state, done = [env.envs[0].render()], None, False
        while not done and len(frames) < max_frames:
            actions, state = run.agent.act(obs, state, explore=False)
            obs, _, terminated, truncated, _ = env.step(actions)
            done = bool(terminated[0] or truncated[0])
            if not done:  # after the last step the env has already reset itself
                frames.append(env.envs[0].render())
    except Exception as error:
        raise RunError(f"env {run.cfg.env.id} cannot render rgb_array frames ({error})") from None
    finally:
        env.close()
    images = [Image.fromarray(frame) for frame in frames]
    path.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return path
