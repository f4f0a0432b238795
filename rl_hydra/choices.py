"""The words a config chooses among where both the schema (which refuses any other) and the code that
acts on them read them. A leaf without torch: the schema runs in a sweep's launching process too."""

TD_LOSSES = ("huber", "mse")
ACTIVATIONS = {"relu": "ReLU", "tanh": "Tanh", "elu": "ELU", "gelu": "GELU", "silu": "SiLU"}  # torch.nn's class of each
CELLS = {"lstm": "LSTM", "gru": "GRU"}  # torch.nn's class of each
# the modules that each env extra of pyproject.toml installs (what `env.extra` may name)
ENV_EXTRAS = {
    "box2d": "Box2D",
    "mujoco": "mujoco",
    "atari": ("ale_py", "cv2"),
    "minatar": "minatar",
    "popgym": "popgym",
    "minigrid": "minigrid",
}
