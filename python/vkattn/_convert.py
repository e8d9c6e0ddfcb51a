"""Arrays in: numpy arrays or torch tensors of any float dtype, any strides, to the C-order
float32 arrays the engine takes — or a one-line vkattn error naming what is wrong."""
import numpy as np

from ._vkattn import ConfigError, DeviceTensor, ShapeError


def _numpy(x):
    """A torch tensor (detached, on the CPU, bfloat16 widened) or anything numpy reads, as numpy."""
    if type(x).__module__.startswith("torch"):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if str(x.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def _first_bad(a, bad):
    index = np.unravel_index(int(np.argmax(bad)), a.shape)
    return "(" + ", ".join(str(int(i)) for i in index) + ")"


def as_array(x, name):
    """A float input as a C-order float32 array; ShapeError for another dtype, NaN or infinity."""
    if isinstance(x, DeviceTensor):
        raise ConfigError(f"{name} is a vkattn.DeviceTensor ({x!r}): only the attention modules' forwards, "
                          f"the encoders' and the decoders' take device tensors so far; read it back with "
                          f"{name}.numpy()")
    a = _numpy(x)
    if a.dtype.kind != "f":
        raise ShapeError(f"{name}: dtype {a.dtype} is not a float dtype; vkattn takes float16, float32 "
                         "or float64 arrays (and torch tensors)")
    a = np.ascontiguousarray(a, dtype=np.float32)
    bad = ~np.isfinite(a)
    if bad.any():
        where = _first_bad(a, bad)
        raise ShapeError(f"{name}: {a[np.unravel_index(int(np.argmax(bad)), a.shape)]} at index {where}; "
                         "inputs must be finite")
    return a


def as_mask(x, name):
    """A mask as PyTorch takes it: bool (True blocks) stays bool, a float one becomes float32
    (added to the scores: 0 keeps, -inf blocks); NaN, +inf and other dtypes are refused."""
    if x is None:
        return None
    a = _numpy(x)
    if a.dtype == np.bool_:
        return np.ascontiguousarray(a)
    if a.dtype.kind != "f":
        raise ShapeError(f"{name}: dtype {a.dtype}; a mask is bool (True blocks a position) or float "
                         "(added to the scores)")
    a = np.ascontiguousarray(a, dtype=np.float32)
    bad = np.isnan(a) | (a == np.inf)
    if bad.any():
        raise ShapeError(f"{name}: {a[np.unravel_index(int(np.argmax(bad)), a.shape)]} at index "
                         f"{_first_bad(a, bad)}; a float mask holds finite values or -inf")
    return a


def state_arrays(state_dict):
    """A state_dict (torch tensors or arrays) as name -> float32 array."""
    return {name: np.ascontiguousarray(_numpy(t), dtype=np.float32) for name, t in state_dict.items()}
