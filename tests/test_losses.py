import torch

from rl_hydra.losses import q_learning_targets, td_loss


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
