"""Devices: which Vulkan devices there are, what device= means, and tensors kept on one."""
from dataclasses import dataclass

from . import _vkattn
from ._convert import as_array


@dataclass(frozen=True)
class Device:
    """One Vulkan device, as `vkattn devices` lists it."""
    index: int            # device=index chooses it
    name: str             # device="a substring of it" chooses it
    type: str             # "discrete GPU", "integrated GPU", "CPU", ...
    driver: str
    memory_bytes: int     # its largest device-local heap
    usable: bool
    unusable_because: str
    chosen: bool          # the one device=None takes (VKATTN_DEVICE, else the best)


def devices():
    """Every Vulkan device there is (DeviceError when Vulkan cannot start)."""
    return [Device(**d) for d in _vkattn.devices()]


def resolve(device):
    """device= as the engine's (backend, selector): None and "gpu" -> the default GPU, "cpu" ->
    the reference, an int -> that index, another str -> a name substring."""
    if device is None or device == "gpu":
        return "gpu", ""
    if device == "cpu":
        return "cpu", ""
    if isinstance(device, bool) or not isinstance(device, (int, str)):
        raise _vkattn.ConfigError(f"device={device!r}: give None, 'cpu', an index into vkattn.devices() "
                                  "or a substring of a device's name")
    return "gpu", str(device)


def to_device(x, device=None):
    """x (an array or a CPU torch tensor of a float dtype) sent to a device and kept there, as
    torch's x.to("cuda"): a vkattn.DeviceTensor. The attention modules, encoders and decoders on
    that device take it as it lies and leave their results there, so that modules chain without
    the data crossing back to the host; .numpy() reads one back."""
    return _vkattn._to_device(as_array(x, "x"), *resolve(device))
