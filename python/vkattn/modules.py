"""torch.nn's attention modules with vkattn's engine behind them: the same constructor and
forward arguments, numpy arrays out. Each module runs on one device (device=, see devices.py)."""
import json

from . import _vkattn
from ._convert import as_array, as_mask, state_arrays
from .devices import resolve
from .trace import Trace


def _fold(fold_layout_steps):
    """trace()'s fold_layout_steps: None, True or False (ConfigError naming it otherwise)."""
    if fold_layout_steps is not None and not isinstance(fold_layout_steps, bool):
        raise _vkattn.ConfigError(f"fold_layout_steps={fold_layout_steps!r}: give None (as the device does), "
                                  "True (folded) or False (copied)")
    return fold_layout_steps


def _inputs(query, key=None, value=None):
    """query, key, value as float32 arrays (key None: the query; value None: the key); one array
    for all three when they are one object (self-attention: uploaded once, as torch's fast path
    takes it)."""
    key = query if key is None else key
    value = key if value is None else value
    q = as_array(query, "query")
    k = q if key is query else as_array(key, "key")
    v = q if value is query else k if value is key else as_array(value, "value")
    return q, (None if k is q else k), (None if v is q else v)


class MultiheadAttention:
    """torch.nn.MultiheadAttention, in eval mode (dropout is the identity), on a vkattn device.

    Deliberate differences (DESIGN.md): is_causal works without an attn_mask; a fully masked row
    gives zero weights and a zero attention output instead of NaN. `attention=` picks the path:
    "auto" (fused when need_weights is False), "unfused" (scores, mask, softmax, values) or "fused"
    (one flash_attention step; no weights)."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None, *, _impl=None):
        self._impl = _impl or _vkattn._Attention(embed_dim, num_heads, bias, add_bias_kv, add_zero_attn,
                                                 kdim or 0, vdim or 0, batch_first, *resolve(device))
        for name, value in self._impl.config.items():
            setattr(self, name, value)
        self.dropout = dropout

    @property
    def device(self):
        """Where it runs: "gpu: <the device's name>" or "cpu: reference (C++ loops)"."""
        return self._impl.device

    def __repr__(self):
        return (f"vkattn.MultiheadAttention(embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"bias={self.bias}, add_bias_kv={self.add_bias_kv}, add_zero_attn={self.add_zero_attn}, "
                f"kdim={self.kdim}, vdim={self.vdim}, batch_first={self.batch_first}) on {self.device}")

    @classmethod
    def from_torch(cls, module, device=None):
        """The same module, with its weights, from a torch.nn.MultiheadAttention."""
        mha = cls(module.embed_dim, module.num_heads, bias=module.in_proj_bias is not None,
                  add_bias_kv=module.bias_k is not None, add_zero_attn=module.add_zero_attn,
                  kdim=module.kdim, vdim=module.vdim, batch_first=module.batch_first, device=device)
        mha.load_state_dict(module.state_dict())
        return mha

    @classmethod
    def from_state_dict(cls, state_dict, num_heads, batch_first=False, add_zero_attn=False, device=None):
        """The module a state_dict under PyTorch's names describes (embed_dim, bias, add_bias_kv,
        kdim and vdim are read from its tensors; num_heads is not in it)."""
        return cls(0, 0, _impl=_vkattn._Attention(state_arrays(state_dict), num_heads, batch_first,
                                                   add_zero_attn, *resolve(device)))

    def load_state_dict(self, state_dict):
        """PyTorch's names (in_proj_weight, in_proj_bias, out_proj.weight, …), tensors or arrays.
        A missing, extra or mis-shaped tensor is a FileError naming it."""
        self._impl.load_state_dict(state_arrays(state_dict))

    def state_dict(self):
        """The weights under PyTorch's names, as float32 arrays."""
        return self._impl.state_dict()

    def __call__(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                 average_attn_weights=True, is_causal=False, attention="auto"):
        """(output, weights) exactly as nn.MultiheadAttention returns them (weights None when not
        asked for): output like query, weights (B, L, S) averaged or (B, H, L, S) per head.
        Given vkattn.DeviceTensors on this module's device (vkattn.to_device, or an earlier
        forward's output), batch-first or unbatched, it returns DeviceTensors left there: nothing
        crosses to or from the host but the masks."""
        on_device = [isinstance(t, _vkattn.DeviceTensor) for t in (query, key, value)]
        if any(on_device):
            if not all(on_device):
                names = [n for n, d in zip(("query", "key", "value"), on_device) if not d]
                raise _vkattn.ConfigError(f"{' and '.join(names)} must be vkattn.DeviceTensors too: give "
                                          "query, key and value all as arrays or all as device tensors")
            return self._impl.forward_on_device(query, key, value, as_mask(key_padding_mask, "key_padding_mask"),
                                                need_weights, as_mask(attn_mask, "attn_mask"),
                                                average_attn_weights, is_causal, attention)
        q, k, v = _inputs(query, key, value)
        return self._impl.forward(q, k, v, as_mask(key_padding_mask, "key_padding_mask"), need_weights,
                                  as_mask(attn_mask, "attn_mask"), average_attn_weights, is_causal,
                                  attention, False)

    forward = __call__

    def trace(self, query, key=None, value=None, key_padding_mask=None, need_weights=True, attn_mask=None,
              average_attn_weights=True, is_causal=False, attention="auto", values=True, side_by_side=False,
              fold_layout_steps=None):
        """(output, Trace): the forward with every step recorded (and its values, unless
        values=False). key and value default to the query. side_by_side=True runs the same
        weights on the CPU reference too: the Trace's table then compares the two step by step.
        fold_layout_steps: None runs split_heads and merge_heads as the device does (a GPU folds
        them into the projections: 0 µs, Step.folded says where); False copies them, as a
        hand-written .transpose(1, 2).contiguous() does; True folds them on any device. The
        output and every step's values are the same bit for bit."""
        q, k, v = _inputs(query, key, value)
        args = (q, k, v, as_mask(key_padding_mask, "key_padding_mask"), need_weights,
                as_mask(attn_mask, "attn_mask"), average_attn_weights, is_causal, attention, True)
        output, weights, recorded = self._impl.forward(*args, _fold(fold_layout_steps))
        reference = None
        if side_by_side:  # the reference takes the path this device took (tuning may choose either)
            cpu = MultiheadAttention.from_state_dict(self.state_dict(), self.num_heads, self.batch_first,
                                                     self.add_zero_attn, device="cpu")
            taken = json.loads(recorded.config)["attention"]
            reference = Trace(cpu._impl.forward(*args[:8], taken, True)[2])
        return output, Trace(recorded, reference=reference, values=values, weights=weights)


class GroupedQueryAttention:
    """The self-attention of Llama, Mistral, Qwen and Gemma (Hugging Face's LlamaAttention), in
    eval mode, on a vkattn device: q_proj, k_proj, v_proj, o_proj; H query heads sharing H_kv
    key/value heads (repeat_interleave's order, without the copy); RoPE on q and k; causal,
    optionally with a sliding window; with q_norm.weight and k_norm.weight in the state_dict,
    Qwen3's RMSNorm of each head's q and k before RoPE (eps 1e-6; qk_norm is then True). Made from
    a state_dict under Hugging Face's names, with what a state_dict cannot say: rope ("half":
    rotate_half, Hugging Face's; "pairs": GPT-J's and Meta's Llama code's), rope_theta,
    rotary_dims (None: all of each head), sliding_window."""

    def __init__(self, state_dict, num_heads, num_kv_heads=None, rope="half", rope_theta=10000.0, rotary_dims=None,
                 causal=True, sliding_window=None, device=None):
        self._impl = _vkattn._GroupedQuery(state_arrays(state_dict), num_heads, num_kv_heads or 0, rope,
                                           float(rope_theta), rotary_dims or 0, causal, sliding_window or 0,
                                           *resolve(device))
        for name, value in self._impl.config.items():
            if name != "module":
                setattr(self, name, value)

    @property
    def device(self):
        """Where it runs: "gpu: <the device's name>" or "cpu: reference (C++ loops)"."""
        return self._impl.device

    def __repr__(self):
        optional = f", sliding_window={self.sliding_window}" if self.sliding_window else ""
        optional += ", qk_norm=True" if self.qk_norm else ""
        return (f"vkattn.GroupedQueryAttention(hidden_size={self.hidden_size}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, rope={self.rope!r}, "
                f"rope_theta={self.rope_theta:g}{optional}) on {self.device}")

    def __call__(self, x, key_padding_mask=None, need_weights=False, average_attn_weights=False, attention="auto",
                 position=0):
        """(output, weights): x (B, T, E) or (T, E) -> output like x; weights per head (B, H, T, T)
        when need_weights (averaged over heads with average_attn_weights), else None. `position`
        is x's first position (RoPE's offset). Given a vkattn.DeviceTensor on this module's device,
        it returns DeviceTensors left there."""
        if isinstance(x, _vkattn.DeviceTensor):
            return self._impl.forward_on_device(x, as_mask(key_padding_mask, "key_padding_mask"), need_weights,
                                                average_attn_weights, attention, position)
        return self._impl.forward(as_array(x, "x"), as_mask(key_padding_mask, "key_padding_mask"), need_weights,
                                  average_attn_weights, attention, position, False)

    forward = __call__

    def trace(self, x, key_padding_mask=None, need_weights=False, average_attn_weights=False, attention="auto",
              position=0, values=True, fold_layout_steps=None):
        """(output, Trace): the forward with every step recorded. fold_layout_steps as
        MultiheadAttention.trace's: None as the device does, False copies, True folds."""
        output, weights, recorded = self._impl.forward(as_array(x, "x"), as_mask(key_padding_mask, "key_padding_mask"),
                                                       need_weights, average_attn_weights, attention, position, True,
                                                       _fold(fold_layout_steps))
        return output, Trace(recorded, values=values, weights=weights)


def _activation(layer):
    """relu, gelu or gelu_tanh (nn.GELU(approximate='tanh')), the step's name. torch keeps a
    relu or gelu as activation_relu_or_gelu (1.12+) — a tanh GELU too, so its approximate is
    read first — or as the function."""
    approximate = getattr(layer.activation, "approximate", "none")
    if approximate == "tanh":
        return "gelu_tanh"
    if approximate != "none":
        raise _vkattn.ConfigError(f"activation gelu(approximate={approximate!r}): vkattn runs "
                                  "the exact gelu and its tanh approximation")
    kind = getattr(layer, "activation_relu_or_gelu", 0)
    if kind:
        return "relu" if kind == 1 else "gelu"
    name = getattr(layer.activation, "__name__", type(layer.activation).__name__).lower()
    if name not in ("relu", "gelu"):
        raise _vkattn.ConfigError(f"activation {name!r}: vkattn runs relu, gelu and gelu_tanh")
    return name


class _Stack:
    """What TransformerEncoder[Layer] and TransformerDecoder[Layer] share: a layer or a stack of
    them, from torch's, on the engine's `_engine` class."""

    _engine = None

    def __init__(self, impl, batch_first):
        self._impl = impl
        self.batch_first = batch_first

    @classmethod
    def from_torch(cls, module, device=None):
        """torch's layer (or stack of layers, alike: torch copies one), its weights on `device`."""
        layer = module.layers[0] if hasattr(module, "layers") else module
        impl = cls._engine(state_arrays(module.state_dict()), layer.self_attn.num_heads, _activation(layer),
                           bool(layer.norm_first), float(layer.norm1.eps), *resolve(device))
        return cls(impl, bool(layer.self_attn.batch_first))

    @property
    def device(self):
        return self._impl.device

    def _in(self, x, name):
        a = as_array(x, name)
        if not self.batch_first and a.ndim == 3:  # (T, B, E) -> the engine's (B, T, E)
            a = a.transpose(1, 0, 2).copy()
        return a

    def _out(self, y):
        return y.transpose(1, 0, 2).copy() if not self.batch_first and y.ndim == 3 else y

    def _on_device(self, **inputs):
        """True when the inputs are all vkattn.DeviceTensors, False when none is; ConfigError when
        only some are, or when one is batched and this module is not batch-first."""
        on = {name: isinstance(x, _vkattn.DeviceTensor) for name, x in inputs.items()}
        if not any(on.values()):
            return False
        if not all(on.values()):
            arrays = [name for name, device in on.items() if not device]
            raise _vkattn.ConfigError(f"{' and '.join(arrays)} must be a vkattn.DeviceTensor too: give "
                                      f"{' and '.join(on)} {'all' if len(on) > 2 else 'both'} as arrays or "
                                      f"{'all' if len(on) > 2 else 'both'} as device tensors")
        for name, x in inputs.items():
            if not self.batch_first and len(x.shape) == 3:
                raise _vkattn.ConfigError(f"{name}: device tensors are batch-first (batch, positions, features), and "
                                          "this module was made with batch_first=False; make it with batch_first=True")
        return True


class _Encoder(_Stack):
    """The common part of TransformerEncoderLayer and TransformerEncoder."""

    _engine = _vkattn._Encoder

    def __call__(self, src, mask=None, src_key_padding_mask=None, is_causal=False, attention="auto"):
        """src (B, L, E) batch_first, (L, B, E) or unbatched (L, E) -> the same shape. A
        vkattn.DeviceTensor on this module's device (batch-first or unbatched) gives one left there."""
        if self._on_device(src=src):
            return self._impl.forward_on_device(src, as_mask(mask, "mask"),
                                                as_mask(src_key_padding_mask, "src_key_padding_mask"), is_causal,
                                                attention)
        y = self._impl.forward(self._in(src, "src"), as_mask(mask, "mask"),
                               as_mask(src_key_padding_mask, "src_key_padding_mask"), is_causal, attention, False)
        return self._out(y)

    forward = __call__

    def trace(self, src, mask=None, src_key_padding_mask=None, is_causal=False, attention="auto", values=True,
              fold_layout_steps=None):
        """(output, Trace) of one forward (steps named layers.N.self_attn.q_proj, …, as torch's modules).
        fold_layout_steps as MultiheadAttention.trace's: None as the device does, False copies,
        True folds."""
        y, recorded = self._impl.forward(self._in(src, "src"), as_mask(mask, "mask"),
                                         as_mask(src_key_padding_mask, "src_key_padding_mask"), is_causal,
                                         attention, True, _fold(fold_layout_steps))
        return self._out(y), Trace(recorded, values=values)


class TransformerEncoderLayer(_Encoder):
    """torch.nn.TransformerEncoderLayer in eval mode, from a trained one (from_torch)."""


class TransformerEncoder(_Encoder):
    """torch.nn.TransformerEncoder in eval mode (its layers alike, an optional final norm)."""


class _Decoder(_Stack):
    """The common part of TransformerDecoderLayer and TransformerDecoder."""

    _engine = _vkattn._Decoder

    def _masks(self, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask):
        return [as_mask(tgt_mask, "tgt_mask"), as_mask(memory_mask, "memory_mask"),
                as_mask(tgt_key_padding_mask, "tgt_key_padding_mask"),
                as_mask(memory_key_padding_mask, "memory_key_padding_mask")]

    def __call__(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                 memory_key_padding_mask=None, tgt_is_causal=False, attention="auto"):
        """tgt (B, T, E) and memory (B, S, E) batch_first, (T, B, E) and (S, B, E), or unbatched
        -> tgt's shape. Masks as torch's decoder takes them (bool True blocks). vkattn.DeviceTensors
        on this module's device (batch-first or unbatched; an encoder's output for memory) give
        one left there."""
        masks = self._masks(tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask)
        if self._on_device(tgt=tgt, memory=memory):
            return self._impl.forward_on_device(tgt, memory, masks, bool(tgt_is_causal), attention)
        y = self._impl.forward(self._in(tgt, "tgt"), self._in(memory, "memory"), masks, bool(tgt_is_causal),
                               attention, False)
        return self._out(y)

    forward = __call__

    def trace(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
              memory_key_padding_mask=None, tgt_is_causal=False, attention="auto", values=True,
              fold_layout_steps=None):
        """(output, Trace) of one forward (steps named layers.N.multihead_attn.q_proj, …, as torch's modules)."""
        masks = self._masks(tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask)
        y, recorded = self._impl.forward(self._in(tgt, "tgt"), self._in(memory, "memory"), masks,
                                         bool(tgt_is_causal), attention, True, _fold(fold_layout_steps))
        return self._out(y), Trace(recorded, values=values)


class TransformerDecoderLayer(_Decoder):
    """torch.nn.TransformerDecoderLayer in eval mode, from a trained one (from_torch)."""


class TransformerDecoder(_Decoder):
    """torch.nn.TransformerDecoder in eval mode (its layers alike, an optional final norm)."""
