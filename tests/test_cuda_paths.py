"""Paths a CPU cannot exercise: a CPU generator driving a model on the GPU (the DLLM decoders seed one generator
per request on the CPU).  Found by the gpu-smoke run on an H200 (Algorithm 3: 'Expected all tensors to be on the
same device'); skipped without CUDA."""

import pytest
import torch

from unie.core.gumbel import gumbel_argmax, uniform

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
def test_cpu_generator_draws_the_same_tokens_for_a_gpu_tensor():
    logp = torch.randn(3, 5, 11, dtype=torch.float64).log_softmax(-1)
    on_cpu = gumbel_argmax(logp, torch.Generator().manual_seed(0))
    on_gpu = gumbel_argmax(logp.cuda(), torch.Generator().manual_seed(0))
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), on_cpu)


@cuda
def test_uniform_lands_on_the_requested_device():
    u = uniform((4, 7), torch.Generator().manual_seed(1), "cuda")
    assert u.device.type == "cuda"
    assert torch.equal(u.cpu(), uniform((4, 7), torch.Generator().manual_seed(1)))


def test_cpu_paths_unchanged():
    """On the CPU the helpers are what they were: the noise of the generator, nothing moved."""
    g1, g2 = torch.Generator().manual_seed(2), torch.Generator().manual_seed(2)
    u = uniform((2, 3), g1, "cpu")
    assert torch.equal(u, torch.rand((2, 3), generator=g2, dtype=torch.float64))
