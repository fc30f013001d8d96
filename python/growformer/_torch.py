"""A trained growformer model as a torch.nn.Module (to_torch) and as an ONNX file (to_onnx).

The module is rebuilt from the experiment's resolved config and its parameters, block by block
with the heads each block has now (grown or pruned), and computes what growformer's forward
pass computes (core/api/src/model.cpp, plugins/attn_mha):

    x = embed[ids] (+ the CLS vector in front with pool: cls) + pos[:T]
    per block: x = x + attention(layer_norm(x));  x = x + fc2(gelu(fc1(layer_norm(x))))
    layer_norm: biased variance, eps 1e-5; gelu: the exact (erf) form
    attention (mha): per head softmax((x W_q + b_q)(x W_k + b_k)^T / sqrt(d_k)) (x W_v + b_v),
                     padded keys (and, causal, later keys) masked; the block's output is
                     sum over heads of out_h W_o,h (divided by the head count with combine: mean)
                     plus b_o
    attention (hkt): the scores are sum_l lambda_l (q_l k_l^T / sqrt(d_k)) through the index
                     map up(S_l)[i, j] = S_l[i / s^l, j / s^l], level l's input made from level
                     l-1's by a causal depthwise convolution of stride s and a pointwise map;
                     lambda = softmax(fusion logits), or per sample softmax(W mean(x) + b);
                     causal: a coarse score only for key blocks wholly at or before the query
    hybrid_conv heads: conv(v) + sigmoid(beta) (attention - conv(v)), conv causal depthwise
    final layer_norm (final_norm), then the mean over the valid positions (or the CLS position),
    then the classifier: logits.

Linear maps keep growformer's layout (W is in x out: y = x W + b). The inputs are token ids as
growformer tokenises them (Experiment.tokenize, split_tokens), padded with the model's pad id;
`encode` pads and truncates lists as growformer's batches do.
"""


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("growformer.to_torch needs PyTorch, which this Python cannot import "
                          "(apt-get install python3-torch, or pip install torch)", name="torch") from e
    return torch


def _error(message):
    from ._core import ConfigError

    return ConfigError(message)


def _block_layout(params, b):
    """The head ids of block B in the order the parameters list them."""
    prefix = f"layers.{b}.attn.heads."
    ids = []
    for name in params:
        if name.startswith(prefix):
            hid = int(name[len(prefix):].split(".")[0])
            if hid not in ids:
                ids.append(hid)
    return ids


def _num_blocks(params):
    """The model's number of blocks as its parameters hold them (a depth edit leaves the
    configuration's `layers` behind)."""
    return len({name.split(".")[1] for name in params if name.startswith("layers.")})


def _check_supported(model_cfg, params):
    att = model_cfg["attention"]
    plugin, head = att.get("plugin"), (att.get("head") or {}).get("plugin", "dot_product")
    if plugin not in ("mha", "hkt") or head not in ("dot_product", "hybrid_conv"):
        raise _error(f"to_torch: attention `{plugin}` with heads `{head}` is not rebuilt in PyTorch; "
                     "the export covers mha and hkt blocks with dot_product and hybrid_conv heads "
                     "(any head count per block, grown or pruned)")
    known = ("b_o", "down.", "fusion.")
    for b in range(_num_blocks(params)):
        pre = f"layers.{b}.attn."
        for name in params:
            if name.startswith(pre) and ".heads." not in name and not name[len(pre):].startswith(known):
                raise _error(f"to_torch: parameter {name} of block {b} is not one an {plugin} block has")


def to_torch(model, dtype=None):
    """MODEL (an Experiment: trained, or loaded with growformer.load) as a torch.nn.Module:
    forward(ids, valid=None) -> logits (B, classes) for int64 token ids (B, T) padded with the
    model's pad id, VALID (B, T) bool marking the real tokens (default: ids != pad_id). DTYPE:
    the parameters' torch dtype (default float32, growformer's). Covers mha and hkt attention
    (hkt's levels, static or input fusion) with dot_product or hybrid_conv heads, any head count
    per block."""
    torch = _torch()
    from ._core import Config

    cfg = Config.from_yaml(model.config).to_dict()["model"]
    params = model.parameters()
    _check_supported(cfg, params)
    from ._torch_model import GrowformerClassifier

    return GrowformerClassifier(cfg, params, model.pad_id, len(model.classes), dtype or torch.float32).eval()


def to_onnx(model, path, opset_version=14):
    """MODEL (an Experiment) exported to the ONNX file PATH through to_torch and
    torch.onnx.export: inputs `ids` (int64, batch x positions) and `valid` (bool, same shape),
    output `logits`; the batch and the positions are dynamic. Returns PATH."""
    torch = _torch()
    module = to_torch(model)
    ids, valid = module.encode([[0 if module.pad_id else 1] * 3, [0 if module.pad_id else 1]])
    torch.onnx.export(module, (ids, valid), str(path), input_names=["ids", "valid"],
                      output_names=["logits"], opset_version=opset_version,
                      dynamic_axes={"ids": {0: "batch", 1: "positions"},
                                    "valid": {0: "batch", 1: "positions"},
                                    "logits": {0: "batch"}})
    return str(path)
