"""vkattn: multi-head attention, step by step, on any Vulkan GPU — from Python, beside PyTorch.

    import vkattn
    mha = vkattn.MultiheadAttention.from_torch(torch_mha)      # device=None: the default GPU
    out, weights = mha(x, x, x)                                # numpy arrays, as nn.MultiheadAttention
    out, weights, trace = mha.trace(x, x, x)                   # every step's tensor
    xd = vkattn.to_device(x)                                   # kept on the GPU, as x.to("cuda")
    y, _ = mha(xd, xd, xd, need_weights=False)                 # a DeviceTensor: y.numpy() reads it
    report = vkattn.check(rec, torch_mha, query=x)             # your own attention, step by step
    gpt2 = vkattn.from_pretrained("models/tiny_gpt2")          # a hub checkpoint folder

Arrays go in as numpy arrays or CPU torch tensors of any float dtype, and come out as float32
numpy arrays. `device=` is None (the default GPU), "cpu" (the C++ reference), an index into
vkattn.devices() or a substring of a device's name. Errors are vkattn.ShapeError, ConfigError,
FileError (all ValueError) and DeviceError (RuntimeError), with the engine's one-line message.
"""
import atexit

from ._vkattn import (ConfigError, DeviceError, DeviceTensor, Error, FileError, ShapeError, __version__,
                      _release_devices, heatmap_svg)
from .check import DIAGNOSES, STEPS, CheckReport, Recorder, attention_weights, check
from .devices import devices, to_device
from .modules import (GroupedQueryAttention, MultiheadAttention, TransformerDecoder, TransformerDecoderLayer,
                      TransformerEncoder, TransformerEncoderLayer)
from .pretrained import EncoderOutput, PretrainedEncoder, PretrainedModel, from_pretrained
from .trace import Step, Trace, load_trace

# Vulkan devices go before the interpreter unloads the extension.
atexit.register(_release_devices)

__all__ = ["MultiheadAttention", "GroupedQueryAttention", "TransformerEncoderLayer", "TransformerEncoder",
           "TransformerDecoderLayer", "TransformerDecoder",
           "from_pretrained", "PretrainedModel", "PretrainedEncoder", "EncoderOutput", "Trace", "Step",
           "load_trace", "Recorder", "check", "attention_weights", "CheckReport", "STEPS", "DIAGNOSES", "devices",
           "to_device", "DeviceTensor",
           "heatmap_svg", "Error", "ShapeError", "ConfigError", "FileError", "DeviceError", "__version__"]
