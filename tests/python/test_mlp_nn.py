# SPDX-License-Identifier: Apache-2.0
"""fieldfuse.nn.MLP: parameters in nn.Linear layout, SIREN init, state_dict and from_torch."""

from __future__ import annotations

import pytest
import torch

import fieldfuse


def test_from_torch_matches_the_sequential():
    seq = torch.nn.Sequential(torch.nn.Linear(3, 32), torch.nn.Softplus(beta=5.0),
                              torch.nn.Linear(32, 32), torch.nn.Softplus(beta=5.0),
                              torch.nn.Linear(32, 2), torch.nn.Sigmoid()).double()
    net = fieldfuse.nn.MLP.from_torch(seq)
    assert net.activation == "softplus" and net.output_activation == "sigmoid"
    x = torch.randn(20, 3, dtype=torch.float64)
    torch.testing.assert_close(net(x), seq(x))


def test_state_dict_round_trip_and_siren_init():
    net = fieldfuse.nn.MLP(2, 1, 16, 2, activation="sine", sine_omega0=30.0)
    assert net.weights[0].abs().max() <= 0.5
    assert net.weights[1].abs().max() <= (6 / 16) ** 0.5 / 30.0
    other = fieldfuse.nn.MLP(2, 1, 16, 2, activation="sine", sine_omega0=30.0)
    other.load_state_dict(net.state_dict())
    x = torch.rand(8, 2)
    assert torch.equal(other(x), net(x))
    assert set(net.state_dict()) == {f"weights.{k}" for k in range(3)} | {
        f"biases.{k}" for k in range(3)}


def test_without_bias_trains():
    net = fieldfuse.nn.MLP(3, 2, 16, 1, bias=False, activation="tanh")
    assert net.biases is None
    net(torch.randn(4, 3)).sum().backward()
    assert all(w.grad is not None for w in net.weights)


@pytest.mark.parametrize(("sequential", "message"), [
    (torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(3, 16)),
     "expected a Sequential starting with nn.Linear"),
    (torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ELU(), torch.nn.Linear(16, 1)),
     "unsupported module ELU"),
    (torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16),
                         torch.nn.Tanh(), torch.nn.Linear(16, 1)),
     "expected one activation of a single type between consecutive Linear layers"),
    (torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Linear(16, 1)),
     "expected one activation of a single type between consecutive Linear layers"),
    (torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 32),
                         torch.nn.ReLU(), torch.nn.Linear(32, 1)),
     "expected equal hidden widths"),
    (torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Softplus(beta=2.0, threshold=10.0),
                         torch.nn.Linear(16, 1)),
     r"expected Softplus with threshold 20 \(fieldfuse's softplus is p itself where βp > 20\), "
     r"but got threshold=10\.0"),
    (torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Softplus(beta=5.0),
                         torch.nn.Linear(16, 16), torch.nn.Softplus(beta=5.0),
                         torch.nn.Linear(16, 1), torch.nn.Softplus(beta=100.0)),
     r"expected every Softplus to have the same beta \(the MLP has one softplus_beta\), but got "
     r"5 and 100"),
    (torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.LeakyReLU(0.1),
                         torch.nn.Linear(16, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1)),
     r"expected every LeakyReLU to have the same negative_slope \(the MLP has one leaky_slope\), "
     r"but got 0\.1 and 0\.2"),
    (torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(),
                         torch.nn.Linear(16, 1, bias=False)),
     "expected every Linear to have a bias or none to, but got a mix"),
    (torch.nn.Sequential(torch.nn.Linear(3, 16, bias=False), torch.nn.ReLU(),
                         torch.nn.Linear(16, 1)),
     "expected every Linear to have a bias or none to, but got a mix"),
])
def test_from_torch_rejects_what_it_cannot_express(sequential, message):
    with pytest.raises(ValueError, match=rf"^MLP\.from_torch\(\): {message}"):
        fieldfuse.nn.MLP.from_torch(sequential)


def test_from_torch_leaky_relu_and_softplus_output():
    # Hidden LeakyReLU(0.2) and an output Softplus(β = 3): each parameter reaches its activation.
    seq = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.LeakyReLU(0.2),
                              torch.nn.Linear(16, 16), torch.nn.LeakyReLU(0.2),
                              torch.nn.Linear(16, 3), torch.nn.Softplus(beta=3.0)).double()
    net = fieldfuse.nn.MLP.from_torch(seq)
    assert (net.activation, net.output_activation) == ("leaky_relu", "softplus")
    x = torch.randn(25, 4, dtype=torch.float64) * 3
    torch.testing.assert_close(net(x), seq(x))


def test_unknown_activation_parameter_is_refused():
    with pytest.raises(TypeError, match=r"^MLP\(\): unknown activation parameters \['omega'\]"):
        fieldfuse.nn.MLP(3, 1, 16, 2, activation="sine", omega=30.0)


@pytest.mark.parametrize(("kwargs", "exc", "message"), [
    (dict(hidden=15), ValueError, r"^mlp\(\): expected weights\[0\] to have a hidden width"),
    (dict(activation="gelu"), ValueError, r"^mlp\(\): expected activation to be one of"),
    (dict(activation="softplus", softplus_beta=0.0), ValueError,
     r"^mlp\(\): expected softplus_beta to be > 0, but got 0"),
    (dict(activation="sine", sine_omega0=0.0), ValueError,
     r"^mlp\(\): expected sine_omega0 to be non-zero, but got 0"),
])
def test_constructor_refuses_what_the_op_would(kwargs, exc, message):
    # Refused when the module is built, not at its first forward.
    args = dict(in_features=3, out_features=1, hidden=16, layers=2) | kwargs
    with pytest.raises(exc, match=message):
        fieldfuse.nn.MLP(**args)


def test_siren_init_with_a_negative_omega():
    # sin(−ω₀p) is a valid network; SIREN's bounds use |ω₀|.
    net = fieldfuse.nn.MLP(2, 1, 16, 2, activation="sine", sine_omega0=-30.0)
    assert 0 < net.weights[1].abs().max() <= (6 / 16) ** 0.5 / 30.0


def test_from_torch_keyword_arguments():
    seq = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Softplus(beta=5.0),
                              torch.nn.Linear(16, 1))
    with pytest.raises(TypeError, match=r"^MLP\.from_torch\(\): expected no keyword argument but "
                       r"compute_dtype \(the rest comes from the Sequential\), but got "
                       r"bias, softplus_beta$"):
        fieldfuse.nn.MLP.from_torch(seq, softplus_beta=5.0, bias=True)
    assert fieldfuse.nn.MLP.from_torch(seq, compute_dtype=torch.float32).compute_dtype == \
        torch.float32


def test_in_and_out_features():
    net = fieldfuse.nn.MLP(5, 3, 16, 2)
    assert (net.in_features, net.out_features) == (5, 3)
