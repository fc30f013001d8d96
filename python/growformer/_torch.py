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
    return _build(torch, cfg, params, model.pad_id, len(model.classes), dtype or torch.float32)


def _build(torch, cfg, params, pad_id, classes, dtype):  # noqa: C901 - one class, built once
    nn = torch.nn
    F = torch.nn.functional

    def p(name):
        return nn.Parameter(torch.tensor(params[name], dtype=dtype), requires_grad=False)

    def causal_conv(x, w, b, stride):
        """growformer's depthwise_conv1d_causal: x (B, T, C), w (C, K): output row t reads input
        rows t * stride - (K - 1) .. t * stride (zeros before the first)."""
        K = w.shape[1]
        y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), w[:, None, :], b, stride=stride, groups=w.shape[0])
        return y.transpose(1, 2)

    class AttentionBlock(nn.Module):
        """An mha or hkt block: its heads' projections stacked (heads, ...) per level, the output
        maps, b_o; hkt's coarser levels and fusion weights; hybrid_conv heads' gates."""

        def __init__(self, b, att):
            super().__init__()
            pre = f"layers.{b}.attn."
            self.head_ids = _block_layout(params, b)
            hkt = att["plugin"] == "hkt"
            self.L = int(att.get("levels", 1)) if hkt else 1
            self.stride = int(att.get("stride", 2))
            share = bool(att.get("share_qk", False))

            def stack(key):
                return nn.Parameter(torch.stack([torch.tensor(params[f"{pre}heads.{h}.{key}"], dtype=dtype)
                                                 for h in self.head_ids]), requires_grad=False)

            sfx = lambda l: "" if l == 0 or share else f"_l{l}"  # noqa: E731
            self.w_q = nn.ParameterList([stack("w_q" + sfx(l)) for l in range(self.L)])
            self.b_q = nn.ParameterList([stack("b_q" + sfx(l)) for l in range(self.L)])
            self.w_k = nn.ParameterList([stack("w_k" + sfx(l)) for l in range(self.L)])
            self.b_k = nn.ParameterList([stack("b_k" + sfx(l)) for l in range(self.L)])
            self.w_v, self.b_v, self.w_o = stack("w_v"), stack("b_v"), stack("w_o")
            self.b_o = p(pre + "b_o")
            self.hybrid = (att.get("head") or {}).get("plugin") == "hybrid_conv"
            if self.hybrid:  # the heads' convolutions as one of H * d_v channels
                w, bias = stack("conv_w"), stack("conv_b")
                self.conv_w = nn.Parameter(w.reshape(-1, w.shape[-1]), requires_grad=False)
                self.conv_b = nn.Parameter(bias.reshape(-1), requires_grad=False)
                self.beta = stack("beta")
            self.down = nn.ParameterList([p(f"{pre}down.{l}.{k}") for l in range(1, self.L)
                                          for k in ("dw", "dw_b", "pw", "pw_b")])
            self.input_fusion = hkt and att.get("fusion", "static") == "input"
            if hkt:
                self.fusion = nn.ParameterList([p(pre + "fusion.w"), p(pre + "fusion.b")] if self.input_fusion
                                               else [p(pre + "fusion.logits")])
            self.causal = bool(att.get("causal", False))
            self.mean = att.get("combine", "sum") == "mean" and len(self.head_ids) > 1
            self.scale = 1.0 / float(self.w_q[0].shape[-1]) ** 0.5

        def project(self, x, w, b):
            return torch.einsum("btd,hde->bhte", x, w) + b[None, :, None, :]

        def lam(self, x, valid):
            """The level weights: (1, L) static, or (B, L) from the masked mean of the input."""
            if not self.input_fusion:
                return torch.softmax(self.fusion[0], dim=0)[None, :]
            w = valid.to(x.dtype)[..., None]
            pooled = (x * w).sum(dim=1) / w.sum(dim=1)
            return torch.softmax(torch.matmul(pooled, self.fusion[0]) + self.fusion[1], dim=-1)

        def scores(self, x, valid):
            """(B, heads, T, T) scores, masked: hkt's sum over levels of lambda_l times the level's
            scores through the index map up(S_l)[i, j] = S_l[i / s^l, j / s^l]."""
            T = x.shape[1]
            q, k = self.project(x, self.w_q[0], self.b_q[0]), self.project(x, self.w_k[0], self.b_k[0])
            s = torch.matmul(q, k.transpose(-1, -2)) * self.scale
            if self.L > 1:
                lam = self.lam(x, valid)  # (B or 1, L)
                s = s * lam[:, 0, None, None, None]
                pos = torch.arange(T, device=x.device)
                xl, block = x, 1
                for l in range(1, self.L):
                    dw, dw_b, pw, pw_b = self.down[4 * (l - 1): 4 * l]
                    xl = torch.matmul(causal_conv(xl, dw, dw_b, self.stride), pw) + pw_b
                    block *= self.stride
                    ql = self.project(xl, self.w_q[l], self.b_q[l])
                    kl = self.project(xl, self.w_k[l], self.b_k[l])
                    sl = torch.matmul(ql, kl.transpose(-1, -2)) * self.scale
                    idx = torch.div(pos, block, rounding_mode="floor")
                    up = sl.index_select(2, idx).index_select(3, idx) * lam[:, l, None, None, None]
                    if self.causal:  # only key blocks wholly at or before the query
                        usable = pos[None, :] < torch.div(pos + 1, block, rounding_mode="floor")[:, None] * block
                        up = up * usable.to(up.dtype)
                    s = s + up
            keep = valid[:, None, None, :]
            if self.causal:
                T = x.shape[1]
                past = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                keep = keep & past[None, None, :, :]
            return s.masked_fill(~keep, float("-inf"))

        def forward(self, x, valid):
            v = self.project(x, self.w_v, self.b_v)
            o = torch.matmul(torch.softmax(self.scores(x, valid), dim=-1), v)
            if self.hybrid:  # conv + sigmoid(beta) (attention - conv), per head
                B, H, T, dv = v.shape
                vc = v.transpose(1, 2).reshape(B, T, H * dv)
                conv = causal_conv(vc, self.conv_w, self.conv_b, 1)
                conv = conv.reshape(B, T, H, dv).transpose(1, 2)
                o = conv + torch.sigmoid(self.beta)[None, :, :, None] * (o - conv)
            y = torch.einsum("bhte,hed->btd", o, self.w_o)
            if self.mean:
                y = y / len(self.head_ids)
            return y + self.b_o

    class Layer(nn.Module):
        def __init__(self, b):
            super().__init__()
            pre = f"layers.{b}."
            self.ln1_g, self.ln1_b = p(pre + "ln1.gamma"), p(pre + "ln1.beta")
            self.ln2_g, self.ln2_b = p(pre + "ln2.gamma"), p(pre + "ln2.beta")
            self.fc1_w, self.fc1_b = p(pre + "mlp.fc1.w"), p(pre + "mlp.fc1.b")
            self.fc2_w, self.fc2_b = p(pre + "mlp.fc2.w"), p(pre + "mlp.fc2.b")
            self.attn = AttentionBlock(b, cfg["attention"])
            self.d = int(cfg["d_model"])  # a constant, for the ONNX export

        def forward(self, x, valid):
            d = self.d
            x = x + self.attn(F.layer_norm(x, (d,), self.ln1_g, self.ln1_b, 1e-5), valid)
            h = F.layer_norm(x, (d,), self.ln2_g, self.ln2_b, 1e-5)
            h = F.gelu(torch.matmul(h, self.fc1_w) + self.fc1_b)
            return x + torch.matmul(h, self.fc2_w) + self.fc2_b

    class GrowformerClassifier(nn.Module):
        """A growformer classifier rebuilt in PyTorch: forward(ids, valid=None) -> logits."""

        def __init__(self):
            super().__init__()
            self.pad_id = int(pad_id)
            self.num_classes = int(classes)
            self.cls_pool = cfg.get("pool", "mean") == "cls"
            self.max_len = int(cfg["max_len"])
            self.max_tokens = self.max_len - 1 if self.cls_pool else self.max_len
            self.embed, self.pos = p("embed"), p("pos")
            if self.cls_pool:
                self.cls = p("cls")
            self.layers = nn.ModuleList([Layer(b) for b in range(_num_blocks(params))])
            self.final_norm = bool(cfg.get("final_norm", True))
            if self.final_norm:
                self.lnf_g, self.lnf_b = p("ln_f.gamma"), p("ln_f.beta")
            self.d = int(cfg["d_model"])
            self.cls_w, self.cls_b = p("classifier.w"), p("classifier.b")
            self.heads_per_block = [len(l.attn.head_ids) for l in self.layers]

        def forward(self, ids, valid=None):
            if valid is None:
                valid = ids != self.pad_id
            valid = valid.to(torch.bool)
            x = self.embed[ids]
            if self.cls_pool:
                B = ids.shape[0]
                x = torch.cat([self.cls.expand(B, 1, -1), x], dim=1)
                valid = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=ids.device), valid], dim=1)
            x = x + self.pos[: x.shape[1]]
            for layer in self.layers:
                x = layer(x, valid)
            if self.final_norm:
                x = F.layer_norm(x, (self.d,), self.lnf_g, self.lnf_b, 1e-5)
            if self.cls_pool:
                pooled = x[:, 0]
            else:
                w = valid.to(x.dtype)[..., None]
                pooled = (x * w).sum(dim=1) / w.sum(dim=1)
            return torch.matmul(pooled, self.cls_w) + self.cls_b

        def encode(self, token_lists):
            """(ids, valid) of token id lists: truncated to the model's positions and padded
            to the longest, as growformer's batches are."""
            rows = [list(t)[: self.max_tokens] for t in token_lists]
            T = max(1, max((len(r) for r in rows), default=1))
            ids = torch.full((len(rows), T), self.pad_id, dtype=torch.long)
            valid = torch.zeros((len(rows), T), dtype=torch.bool)
            for i, r in enumerate(rows):
                ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
                valid[i, : len(r)] = True
            return ids, valid

    return GrowformerClassifier().eval()


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
