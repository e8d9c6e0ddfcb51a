"""Shared by the tests: both backends, torch's reference, the tolerances of the golden tests."""
import os
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # article_safetensors
# The lessons' hand-written attention (check_your_attention.ArticleAttention) is tested too.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tutorials", "python"))

ATOL, RTOL = 1e-5, 1e-5  # tests/golden's: vkattn against PyTorch in float32


@pytest.fixture(params=["gpu", "cpu"])
def device(request):
    """The default Vulkan device (lavapipe in CI) and the C++ reference."""
    return None if request.param == "gpu" else "cpu"


def assert_close(actual, expected, atol=ATOL, rtol=RTOL):
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    assert isinstance(actual, np.ndarray) and actual.dtype == np.float32
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, atol=atol, rtol=rtol)
