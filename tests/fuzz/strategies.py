"""Hypothesis strategies that draw mutations of a run directory (tests/fuzz/mutations.py): YAML
and JSON keys set to hostile values or deleted, whole files replaced or cut, metrics.csv's fields and
lines, checkpoint entries (reference bombs and declared shapes among them), checkpoint archives
(tests/fuzz/archive.py), links, hard links, folders, FIFOs, a link swapped in while the command
runs, and the named attacks (tests/fuzz/attacks.py). `changes` draws one to three of them: what a
case applies to its copy of a real run."""

from __future__ import annotations

from hypothesis import strategies as st

from tests.fuzz.archive import HOWS, Archive
from tests.fuzz.attacks import ATTACKS, GIF, Attack
from tests.fuzz.mutations import (
    BEST,
    BOMB,
    CONFIG,
    DEEP_JSON_OBJECT,
    DEEP_LIST,
    FILES,
    FOLDERS,
    HUGE_INT,
    HYDRA,
    LAST,
    OVERRIDES,
    PLANTED,
    PROVENANCE,
    PYTHON_TAG,
    SUMMARY,
    Big,
    Bomb,
    Checkpoint,
    CsvCell,
    CsvLine,
    Declared,
    Delete,
    Fifo,
    Folder,
    HardLink,
    Link,
    Long,
    Nest,
    Raw,
    Remove,
    Set,
    Swap,
    Tensor,
    Truncate,
    WholeCheckpoint,
    Write,
    keys,
)

# where the values go: the keys a DQN CartPole run's files hold, and some they do not
CONFIG_KEYS = keys("""
    algo algo/_target_ algo/batch_size algo/learning_starts algo/train_every algo/gradient_steps algo/gamma
    algo/n_step algo/optimizer algo/optimizer/_target_ algo/optimizer/lr algo/exploration/fraction algo/loss
    algo/target_update_every env env/id env/num_envs env/max_episode_steps env/kwargs env/kwargs/x env/wrappers
    env/wrappers/0 env/vectorization env/extra env/name network/_target_ network/hidden_sizes
    network/hidden_sizes/0 network/activation network/encoder buffer/_target_ buffer/capacity buffer/device
    logger logger/csv logger/csv/_target_ logger/csv/note logger/tensorboard logger/mlflow distributed
    distributed/name distributed/address seed device torch_threads compile fast_paths train train/total_steps
    train/eval_every train/eval_episodes train/checkpoint_every train/log_every train/stop_at_return
    train/progress checkpoint/save_buffer preset/name new_key train/new_key""")
SUMMARY_KEYS = keys("""
    status reason algo env env_id seed global_step updates eval_return_mean best_eval_return_mean stop_at_return
    solved_at_step wall_time_s extra""")
PROVENANCE_KEYS = keys("""
    sessions sessions/0 sessions/0/start_step sessions/0/end_step sessions/0/status sessions/0/config_changes
    sessions/0/device sessions/0/torch sessions/0/config_changes/train.total_steps
    sessions/0/config_changes/algo._target_ sessions/0/config_changes/env.id sessions/9 extra""")
HYDRA_KEYS = keys("""
    hydra hydra/runtime/choices hydra/runtime/choices/algo hydra/runtime/choices/env hydra/overrides/task
    hydra/run/dir hydra/runtime/output_dir hydra/hydra_logging/filters/short_joblib_line/() hydra/searchpath
    hydra/callbacks/x/_target_ hydra/job_logging/handlers/console/stream""")
OVERRIDE_KEYS = keys("0 1 99")
CHECKPOINT_KEYS = keys("""
    agent agent/q_net/net.0.weight agent/q_net/net.4.bias agent/target_net/net.2.weight agent/updates agent/rng
    agent/optimizer/param_groups/0/lr agent/optimizer/state runner runner/global_step runner/best_eval_return
    runner/episodes runner/finished_returns rng/torch rng/action_space env/exact env/state/0/attributes/state
    env/state/0/attributes/render_mode env/state/0/elapsed_steps env/state/0/elapsed_steps/0 env/obs buffer/pos
    buffer/size buffer/storage/obs buffer/storage/actions buffer/generator agent/optimizer/param_groups/0/betas
    agent/optimizer/param_groups/0/eps agent/optimizer/state/0/exp_avg_sq agent/optimizer/state/0/step extra""")

# the values
TARGETS = [
    f"{PLANTED}.X", "os.system", "builtins.exec", "builtins.eval", "torch.load", "subprocess.run", "io.open",
    "importlib.import_module", "shutil.rmtree", "fuzz_evil.X", "gymnasium.wrappers.RecordVideo", "torch.optim.SGD",
    "rl_hydra.runs.run_dir.atomic_write_text", "rl_hydra.algos.no_such.Thing", "rl_hydra.algos.dqn.DQN",
    "rl_hydra.loggers.mlflow.MLflowLogger", "rl_hydra.loggers.wandb.WandbLogger", "",
]  # fmt: skip
STRINGS = [
    # references, resolvers (nested, cyclic, dangling), and strings that name code or a place
    "${oc.env:HOME}", "${oc.env:RL_HYDRA_FUZZ_MARK}", "${oc.decode:'{_target_: os.system}'}", "${oc.select:seed}",
    "${oc.create:{_target_: os.system}}", "${train.total_steps}", "${..total_steps}", "${.x}", "${nope.nothing}",
    "${${train.log_every}}", "${env.id}", "${seed}", "${train}", "${hydra:runtime.cwd}", "${now:%Y}",
    f"${{rl_hydra.help_groups:[pkg://{PLANTED}]}}", "${rl_hydra.help_groups:[file:///]}",
    "${rl_hydra.updates:1e300,0,1,1}", "${rl_hydra.updates:inf,0,1,1}", "${rl_hydra.updates:a,b,c,d}",
    Long("${rl_hydra.updates:" + "9" * 5000 + ",0,1,1}"), "${rl_hydra.env_name:cartpole,${env.id}}",
    "${rl_hydra.job_dir:/,x}", "${rl_hydra.no_such:1}", "${rl_hydra.updates:${train.total_steps},0,1,1}",
    f"{PLANTED}:CartPole-v1", f"{PLANTED}:Env-v0", "fuzz_evil:Env-v0", f"{PLANTED}.X", "os.system",
    "ray://127.0.0.1:1", "http://127.0.0.1:1", "https://example.invalid/x", "file:///etc/passwd",
    "sqlite:///pwned.db", "/etc/passwd", "../../outside", "~", "", " ", "\x00", "é", "???", Long("x" * 200_000),
    "cuda", "cuda:99", "meta", "mps", "CartPole-v0", "ALE/Pong-v5", "MountainCar-v0", "LunarLander-v3",
    "async", "envpool", "human", "rgb_array", "offline", "online",
]  # fmt: skip
NUMBERS = [0, -1, 1, 2**31, 2**63, 2**64, 10**12, -(10**12), 1e300, -1e300, 1e-320, float("inf"), float("nan"), 0.5]
RAW_YAML = [
    HUGE_INT, Raw("-" + "9" * 5000, "-9..9 (5000 digits)"), Raw("1e400"), DEEP_LIST, BOMB, PYTHON_TAG,
    Raw("{a: " * 2000 + "1" + "}" * 2000, "{a: {a: ... 2000 deep"), Raw("!!binary aGVsbG8="),
    Raw("!!timestamp 2001-12-14"), Raw("!!set {a, b}"), Raw(".nan"), Raw("-.inf"), Raw("0x_7fffffffffffffff"),
    Raw("0o777777777777777777777"), Raw("&a [*a]"), Raw("*nowhere"), Raw("{<<: {_target_: os.system}}"),
]  # fmt: skip
RAW_JSON = [HUGE_INT, Raw("1e400"), Raw("NaN"), Raw("-Infinity"), Raw('"\\ud800"'), DEEP_LIST, DEEP_JSON_OBJECT]
CSV_TEXTS = [
    "²", "٣٠٠", "3e2", "-1", "", "nan", "inf", "1e400", Long("9" * 5000), Long("x" * 200_000), "\ufeff300", " 300",
    "0x12c", "300.0", '"', "a,b", "\r", "\x00",
]  # fmt: skip
TENSORS = "expand expand_all grow empty nan meta sparse transpose scalar float64 float16 int8 uint8 bool complex64"
TENSORS = TENSORS.split()
WHOLE_FILES = [b"", b"\xff\xfe\x00", b"[]", b"{}", b"null", b"- a\n- b\n", b"seed: 0\n", b"PK\x03\x04" + b"\x00" * 40]
LINK_TARGETS = ["outside", "self", "dangling", "inside", "/dev/zero", "/etc/passwd", "/"]
LINKS_IN = ["checkpoints/last.pt", "../checkpoints/last.pt", "../../checkpoints/last.pt", "summary.json", "../.lock"]

names = st.sampled_from(["_target_", "_partial_", "_args_", "_recursive_", "_convert_", "a", "lr", "id", "name"])
target_node = st.builds(
    lambda target, extra: {"_target_": target, **extra},
    st.sampled_from(TARGETS),
    st.dictionaries(st.sampled_from(["command", "path", "_partial_"]), st.sampled_from(["touch pwned", True])),
)
scalars = st.one_of(st.sampled_from(NUMBERS), st.integers(), st.floats(), st.booleans(), st.none(),
                    st.text(max_size=12), st.sampled_from(STRINGS))  # fmt: skip


def nested(leaf: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
                        max_leaves=6)  # fmt: skip


yaml_values = nested(st.one_of(scalars, st.sampled_from(RAW_YAML), target_node))
json_values = nested(st.one_of(scalars, st.sampled_from(RAW_JSON)))
DECLARED = [Declared((10**12,), (1,)), Declared((10**6, 10**6), (0, 0)), Declared((-1,), (1,)),
            Declared((2, 2), (-1, 1))]  # fmt: skip
checkpoint_values = st.one_of(
    st.builds(Tensor, st.sampled_from(TENSORS)), st.just(Big(5000)), st.sampled_from(NUMBERS), st.just("DELETE"),
    st.integers(), st.sampled_from(["600", "", None, [], {}, [1, 2], {"global_step": 1}, True]), st.text(max_size=4),
    st.builds(Bomb, st.integers(1, 60)), st.sampled_from(DECLARED),
    st.sampled_from(["human", "rgb_array", [5.0, -3.0]]),
)  # fmt: skip


def tree_edits(file: str, at: list[tuple], values: st.SearchStrategy) -> st.SearchStrategy:
    return st.builds(Set, st.just(file), st.sampled_from(at), values) | st.builds(Delete, st.just(file),
                                                                                  st.sampled_from(at))  # fmt: skip


mutation = st.one_of(
    tree_edits(CONFIG, CONFIG_KEYS, yaml_values),
    tree_edits(SUMMARY, SUMMARY_KEYS, json_values),
    tree_edits(PROVENANCE, PROVENANCE_KEYS, json_values),
    tree_edits(HYDRA, HYDRA_KEYS, yaml_values),
    tree_edits(OVERRIDES, OVERRIDE_KEYS, yaml_values),
    st.builds(Write, st.sampled_from(FILES), st.sampled_from(RAW_YAML + RAW_JSON + WHOLE_FILES) | st.binary()),
    st.builds(Truncate, st.sampled_from(FILES), st.floats(0, 1)),
    st.builds(Remove, st.sampled_from(FILES + FOLDERS)),
    st.builds(CsvCell, st.integers(0, 8), st.integers(0, 15),
              st.sampled_from(CSV_TEXTS) | st.binary(min_size=1, max_size=3) | st.text(max_size=6)),
    st.builds(CsvLine, st.sampled_from(["duplicate", "drop", "blank", "swap"]), st.integers(0, 8)),
    st.builds(Checkpoint, st.sampled_from([LAST, BEST]), st.sampled_from(CHECKPOINT_KEYS) | st.integers(0, 300),
              checkpoint_values),
    st.builds(WholeCheckpoint, st.sampled_from([LAST, BEST]),
              st.sampled_from([[1, 2], None, 3, "x", {"runner": None}, Tensor("expand")])),
    st.builds(Link, st.sampled_from(FILES + FOLDERS), st.sampled_from(LINK_TARGETS)),
    st.builds(Link, st.sampled_from((*FILES, GIF)), st.sampled_from([f"relative:{RELATIVE}" for RELATIVE in LINKS_IN])),
    st.builds(HardLink, st.sampled_from((*FILES, GIF, "tb/events")), st.sampled_from(["in", "out"])),
    st.builds(Folder, st.sampled_from((*FILES, ".evil.tmp", "checkpoints/.x.tmp"))),
    st.builds(Archive, st.sampled_from([LAST, BEST]), st.sampled_from(HOWS)),
    st.builds(Swap, st.sampled_from(FOLDERS)),
    st.builds(Nest, st.sampled_from(FOLDERS), st.sampled_from([65, 1200])),
    st.builds(Fifo, st.sampled_from(FILES)),
    st.builds(Attack, st.sampled_from(sorted(ATTACKS))),
)  # fmt: skip
changes = st.lists(mutation, min_size=1, max_size=3)
