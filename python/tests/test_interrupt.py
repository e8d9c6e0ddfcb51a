"""Ctrl-C during a long forward: a step the device would run for over a second runs as several
submissions, and between two of them a KeyboardInterrupt stops the forward (the C++ engine asks
Python for pending signals there); the device keeps working afterwards."""
import os
import signal
import threading

import numpy as np
import pytest
import torch

import vkattn


def test_ctrl_c_stops_a_long_forward_between_submissions():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(64, 1, batch_first=True).eval()
    ours = vkattn.MultiheadAttention.from_torch(mha)  # the default GPU (lavapipe: seconds for this pass)
    x = torch.randn(1, 40000, 64)
    timer = threading.Timer(0.8, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt, match=r"after \d+% of flash_attention"):
            ours(x, x, x, need_weights=False, is_causal=True)
    finally:
        timer.cancel()
    small = torch.randn(2, 5, 64)
    with torch.no_grad():
        expected, _ = mha(small, small, small, need_weights=False)
    out, _ = ours(small, small, small, need_weights=False)
    np.testing.assert_allclose(out, expected.numpy(), atol=1e-5, rtol=1e-5)
