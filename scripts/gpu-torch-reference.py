"""PyTorch-eager reference for scripts/gpu-torch-bench.sh: the same Qwen3-shaped model as rtjob's
(RMSNorm, rotate-half RoPE, grouped-query attention with per-head q/k RMSNorm, SwiGLU MLP, tied
embeddings; HF transformers' Qwen3 equations, written out here because transformers is not
guaranteed on the GPU machine), the same random weights' distribution, a masked next-token NLL,
torch.optim.AdamW, and batched KV-cache decode. Prints one JSON object.

Usage: python3 gpu-torch-reference.py CONFIG.json [--layers N] [--batch 8] [--seq 512]
       [--steps 3] [--precision fp32|tf32|bf16] [--decode-batch 32]
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("config")
p.add_argument("--layers", type=int)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--precision", default="tf32", choices=["fp32", "tf32", "bf16"])
p.add_argument("--decode-batch", type=int, default=32)
a = p.parse_args()
cfg = json.load(open(a.config))
L = a.layers or cfg["num_hidden_layers"]
D, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = a.precision != "fp32"
torch.backends.cudnn.allow_tf32 = a.precision != "fp32"
autocast = torch.autocast(dev, dtype=torch.bfloat16, enabled=a.precision == "bf16")


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = lambda *s: torch.nn.Parameter(torch.randn(*s) * 0.02)
        o = lambda *s: torch.nn.Parameter(torch.ones(*s))
        self.embed = g(V, D)
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            m = torch.nn.Module()
            m.ln1, m.ln2, m.qn, m.kn = o(D), o(D), o(hd), o(hd)
            m.q, m.k, m.v, m.o = g(H * hd, D), g(KV * hd, D), g(KV * hd, D), g(D, H * hd)
            m.gate, m.up, m.down = g(I, D), g(I, D), g(D, I)
            self.layers.append(m)
        self.norm = o(D)
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(4096).float(), inv)
        self.register_buffer("cos", torch.cat([ang.cos(), ang.cos()], -1), persistent=False)
        self.register_buffer("sin", torch.cat([ang.sin(), ang.sin()], -1), persistent=False)

    def rope(self, x, pos):
        c, s = self.cos[pos][:, None], self.sin[pos][:, None]  # [B,1,T,hd]
        rot = torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
        return x * c + rot * s

    def forward(self, ids, past=None):
        B, T = ids.shape
        Tp = 0 if past is None else past[0][0].shape[2]
        pos = torch.arange(Tp, Tp + T, device=ids.device)[None].expand(B, T)
        h = F.embedding(ids, self.embed)
        present = []
        for i, m in enumerate(self.layers):
            x = rms(h, m.ln1)
            q = rms((x @ m.q.t()).view(B, T, H, hd), m.qn).transpose(1, 2)
            k = rms((x @ m.k.t()).view(B, T, KV, hd), m.kn).transpose(1, 2)
            v = (x @ m.v.t()).view(B, T, KV, hd).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if past is not None:
                k = torch.cat([past[i][0], k], 2)
                v = torch.cat([past[i][1], v], 2)
            present.append((k, v))
            ke = k.repeat_interleave(H // KV, 1)
            ve = v.repeat_interleave(H // KV, 1)
            att = F.scaled_dot_product_attention(q, ke, ve, is_causal=past is None)
            h = h + att.transpose(1, 2).reshape(B, T, H * hd) @ m.o.t()
            y = rms(h, m.ln2)
            h = h + (F.silu(y @ m.gate.t()) * (y @ m.up.t())) @ m.down.t()
        return rms(h, self.norm) @ self.embed.t(), present


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


out = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__,
       "precision": a.precision, "layers": L, "batch": a.batch, "seq": a.seq}
model = Model().to(dev)
out["params"] = sum(p.numel() for p in model.parameters())
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0)
g = torch.Generator().manual_seed(0)
ids = torch.randint(0, V, (a.batch, a.seq), generator=g).to(dev)


def step():
    t0 = time.perf_counter()
    with autocast:
        logits, _ = model(ids[:, :-1])
    logp = torch.log_softmax(logits.float(), -1)
    loss = -logp.gather(-1, ids[:, 1:, None]).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    sync()
    return time.perf_counter() - t0


step()
times = [step() for _ in range(a.steps)]
out["train"] = {"secondsPerStep": times, "tokensPerSecond": a.batch * a.seq / min(times)}
if dev == "cuda":
    out["train"]["peakGiB"] = torch.cuda.max_memory_allocated() / 2**30

with torch.no_grad(), autocast:
    prompts = torch.randint(0, V, (a.decode_batch, 64), generator=g).to(dev)
    logits, past = model(prompts)
    tok = logits[:, -1].argmax(-1, keepdim=True)
    logits, past = model(tok, past)
    sync()
    t0 = time.perf_counter()
    new = 32
    for _ in range(new):
        tok = logits[:, -1].float().argmax(-1, keepdim=True)
        logits, past = model(tok, past)
    sync()
    out["decode"] = {"batch": a.decode_batch, "newTokens": new,
                     "tokensPerSecond": a.decode_batch * new / (time.perf_counter() - t0)}
print(json.dumps(out))
