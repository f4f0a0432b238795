import torch

from rl_hydra.losses import inverse_value_rescale, q_learning_targets, td_loss, value_rescale


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
