import torch

from rl_hydra.losses import (
    bellman_target,
    ensemble_mse,
    inverse_value_rescale,
    midpoint_taus,
    q_learning_targets,
    soft_actor_loss,
    soft_value,
    td_loss,
    temperature_loss,
    value_rescale,
)


def test_q_learning_targets_by_hand():
    rewards = torch.tensor([1.0, 0.5])
    terminated = torch.tensor([0.0, 1.0])
    next_q_target = torch.tensor([[2.0, 3.0], [10.0, -1.0]])
    targets = q_learning_targets(rewards, terminated, next_q_target, discounts=0.9)
    # row 0: 1 + 0.9 * max(2, 3) = 3.7; row 1 is terminal: 0.5
    torch.testing.assert_close(targets, torch.tensor([3.7, 0.5]))


def test_double_q_selects_with_online_and_evaluates_with_target():
    rewards = torch.tensor([0.0])
    terminated = torch.tensor([0.0])
    next_q_target = torch.tensor([[2.0, 3.0]])
    next_q_online = torch.tensor([[5.0, 1.0]])  # online prefers action 0
    targets = q_learning_targets(rewards, terminated, next_q_target, 0.5, next_q_online)
    torch.testing.assert_close(targets, torch.tensor([1.0]))  # 0.5 * Q_target(s', 0) = 0.5 * 2


def test_td_loss_huber_and_mse_by_hand():
    q = torch.tensor([0.0, 0.0])
    targets = torch.tensor([0.5, 3.0])
    # Huber(delta=1): 0.5 * 0.5^2 = 0.125 and 3 - 0.5 = 2.5 -> mean 1.3125
    torch.testing.assert_close(td_loss(q, targets, "huber"), torch.tensor(1.3125))
    torch.testing.assert_close(td_loss(q, targets, "mse"), torch.tensor((0.25 + 9.0) / 2))


def test_value_rescaling_by_hand_and_its_inverse():
    x = torch.tensor([-3.0, 0.0, 3.0, 8.0])
    # h(x) = sign(x)(sqrt(|x| + 1) - 1) + 0.001 x: h(3) = 2 - 1 + 0.003, h(8) = 3 - 1 + 0.008
    torch.testing.assert_close(value_rescale(x), torch.tensor([-1.003, 0.0, 1.003, 2.008]))
    returns = torch.linspace(-1e4, 1e4, 20001, dtype=torch.float64)
    torch.testing.assert_close(inverse_value_rescale(value_rescale(returns)), returns, rtol=1e-9, atol=1e-9)
    assert (value_rescale(returns).diff() > 0).all()  # increasing: the greedy action is h's too


# --- the actor-critic family's math (algos/actor_critic.py, redq.py, td3.py, crossq.py, tqc.py) ---------
def test_soft_bellman_target_by_hand():
    rewards, terminated = torch.tensor([1.0, -2.0]), torch.tensor([0.0, 1.0])
    next_q = torch.tensor([[3.0, 5.0], [7.0, 4.0]])  # (B, M): REDQ's subset, SAC's pair, CrossQ's live critics
    next_log_prob = torch.tensor([-1.0, 0.5])
    next_values = soft_value(next_q, next_log_prob, alpha=0.2)
    torch.testing.assert_close(next_values, torch.tensor([3.2, 3.9]))  # min(3, 5) + 0.2; min(7, 4) - 0.1
    # row 0: 1 + 0.9 * 3.2 = 3.88; row 1 is terminal: -2
    targets = bellman_target(rewards, terminated, next_values, torch.tensor([0.9, 0.9]))
    torch.testing.assert_close(targets, torch.tensor([3.88, -2.0]))


def test_clipped_double_q_target_is_the_min_of_both_target_critics_by_hand():
    rewards, terminated = torch.tensor([1.0, -1.0]), torch.tensor([0.0, 1.0])
    next_q = torch.tensor([[3.0, 2.0], [5.0, 7.0]])  # (B, 2): TD3's at the smoothed target action
    got = bellman_target(rewards, terminated, next_q.min(dim=1).values, 0.9)
    torch.testing.assert_close(got, torch.tensor([1.0 + 0.9 * 2.0, -1.0]))


def test_ensemble_mse_sums_the_critics_losses():
    q_values = torch.tensor([[1.0, 2.0], [3.0, 0.0]])  # (B=2, N=2)
    targets = torch.tensor([1.0, 1.0])
    # critic 0: (0 + 4) / 2 = 2; critic 1: (1 + 1) / 2 = 1
    torch.testing.assert_close(ensemble_mse(q_values, targets), torch.tensor(3.0))


def test_soft_actor_and_temperature_losses_by_hand():
    log_prob, q_value = torch.tensor([-1.0, 0.5]), torch.tensor([2.0, 4.0])
    # mean(0.2 * -1 - 2, 0.2 * 0.5 - 4) = mean(-2.2, -3.9)
    torch.testing.assert_close(soft_actor_loss(log_prob, q_value, 0.2), torch.tensor(-3.05))
    log_alpha = torch.tensor(0.5, requires_grad=True)
    loss = temperature_loss(log_alpha, log_prob, target_entropy=-1.0)  # -0.5 * mean(-2, -0.5)
    torch.testing.assert_close(loss, torch.tensor(0.625))
    loss.backward()  # the entropy (0.25) is above its target (-1): alpha shrinks
    assert log_alpha.grad is not None and float(log_alpha.grad) > 0


def test_midpoint_taus():
    torch.testing.assert_close(midpoint_taus(4), torch.tensor([0.125, 0.375, 0.625, 0.875]))
