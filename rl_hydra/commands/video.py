"""Record a greedy episode of a loaded run as an animated GIF (Pillow), from the env's rgb_array
frames: classic control renders with pygame (the video extra); ALE and MinAtar render by themselves."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rl_hydra.envs import make_env
from rl_hydra.runs.run_dir import RunError, atomic_write_bytes

MIN_SIDE = 160  # smaller frames (MinAtar's 10x10 grid) are enlarged, each cell a block of pixels


def gif_frame(frame: np.ndarray) -> np.ndarray:
    """An (H, W, 3) uint8 image of a rendered frame: floats in [0, 1] (MinAtar's) become 0..255,
    and a small frame is enlarged by a whole factor, without blurring."""
    frame = np.asarray(frame)
    if frame.dtype != np.uint8:
        frame = np.clip(np.rint(frame * 255.0), 0, 255).astype(np.uint8)
    factor = -(-MIN_SIDE // min(frame.shape[:2]))
    if factor > 1:
        frame = frame.repeat(factor, axis=0).repeat(factor, axis=1)
    return frame


def record_gif(run, path: Path, seed: int = 0, max_frames: int = 1000, fps: int = 30) -> Path:
    """Record a greedy episode into the GIF `path` (written whole, by a rename)."""
    data = gif_bytes(run, seed, max_frames, fps)
    atomic_write_bytes(path, lambda f: f.write(data))
    return path


def gif_bytes(run, seed: int = 0, max_frames: int = 1000, fps: int = 30) -> bytes:
    """A greedy episode of `run` as the bytes of an animated GIF, made in memory: the caller
    writes it where it belongs (evaluate: into the run's eval/videos/, by handle)."""
    # offscreen rendering: keep SDL from looking for a display or a sound card
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    try:
        from PIL import Image
    except ImportError as error:
        raise RunError(f"video=true needs {error.name}: pip install 'rl-hydra[video]'") from None
    env = make_env(run.cfg.env, seed=seed, num_envs=1, render_mode="rgb_array")
    assert isinstance(env, gym.vector.SyncVectorEnv)  # rendering steps the envs in this process
    try:
        obs, _ = env.reset(seed=[seed])
        frames: list[Any] = [env.envs[0].render()]  # rgb_array frames (gymnasium types render loosely)
        state, done = None, False
        while not done and len(frames) < max_frames:
            actions, state = run.agent.act(obs, state, explore=False)
            obs, _, terminated, truncated, _ = env.step(actions)
            done = bool(terminated[0] or truncated[0])
            if not done:  # after the last step the env has already reset itself
                frames.append(env.envs[0].render())
    except gym.error.DependencyNotInstalled as error:  # pygame, for classic control
        raise RunError(f"video=true: {str(error).splitlines()[0]}; pip install 'rl-hydra[video]'") from None
    except Exception as error:
        raise RunError(f"env {run.cfg.env.id} cannot render rgb_array frames ({error})") from None
    finally:
        env.close()
    if frames[0] is None:
        raise RunError(f"env {run.cfg.env.id} rendered no rgb_array frame")
    images = [Image.fromarray(gif_frame(frame)) for frame in frames]
    out = io.BytesIO()
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return out.getvalue()
