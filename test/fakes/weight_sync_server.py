"""A fake SGLang or vLLM server's weight routes, in Python with torch.distributed, for the
in-memory weight sync (engines/README.md, "In-memory weight sync"): it joins the trainer's
weight-update group over Gloo as SGLang and vLLM do, receives every tensor by broadcast from
rank 0, and holds what it received; everything else (generation, pause, health) is passed to an
upstream fake (test/fakes/sglang-server.ts) when one is given.

  python3 weight_sync_server.py --kind sglang|vllm [--model DIR] [--upstream URL] [--hang]

prints `listening on http://127.0.0.1:PORT` once it serves. Routes:

  sglang  POST /init_weights_update_group {master_address, master_port, rank_offset, world_size,
               group_name, backend}; POST /update_weights_from_distributed {names, dtypes,
               shapes, group_name, flush_cache, weight_version}: one broadcast per tensor, in
               order; the last bucket (the one with weight_version) commits every bucket since
               the previous commit; POST /destroy_weights_update_group {group_name};
               POST /get_weights_by_name {name, truncate_size}: the tensor's first rows, as lists;
               POST /update_weights_from_disk {model_path, weight_version}
  vllm    POST /init_weight_transfer_engine {init_info: {master_address, master_port,
               rank_offset, world_size}}; POST /start_weight_update; POST /update_weights
               {update_info: {names, dtype_names, shapes}}; POST /finish_weight_update (commits)
  both    GET /fake/state: {version, updates, digests: {name: sha256 of the bytes held}, errors}

Every received tensor is checked against what the server holds (same name and shape; no name
twice in one update; every weight sent) before anything is committed; a broadcast that fails or times out
discards the update and answers 500, keeping the old weights. With --hang an update is
acknowledged by nothing: its handler waits (never broadcasting) until the server stops.
Real SGLang joins through its own `init_custom_process_group` (a group of its own name); the
fake, one process per server, uses the default group, whose store layout rtjob's rank 0 serves.
"""
import argparse
import datetime
import hashlib
import json
import os
import struct
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--kind", choices=["sglang", "vllm"], default="sglang")
ap.add_argument("--port", type=int, default=0)
ap.add_argument("--model", default=None)
ap.add_argument("--upstream", default=None)
ap.add_argument("--hang", action="store_true")
ap.add_argument("--timeout-s", type=float, default=60)
args = ap.parse_args()

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ST_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}

state = {"weights": {}, "version": None, "updates": 0, "errors": [], "staged": {}}
dist_lock = threading.Lock()
stopping = threading.Event()


def read_safetensors(path):
    # One writable buffer the tensors view (no copy per tensor): a 0.6B model reloads in one.
    raw = bytearray(os.path.getsize(path))
    with open(path, "rb") as f:
        f.readinto(raw)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(bytes(raw[8 : 8 + n]))
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        dtype = ST_DTYPES[meta["dtype"]]
        count = (b - a) // torch.tensor([], dtype=dtype).element_size()
        t = torch.frombuffer(raw, dtype=dtype, count=count, offset=8 + n + a)
        out[name] = t.reshape(meta["shape"])
    return out


def load_dir(path):
    return read_safetensors(os.path.join(path, "model.safetensors"))


def digest(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def join_group(addr, port, rank, world):
    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{addr}:{port}",
        world_size=world,
        rank=rank,
        timeout=datetime.timedelta(seconds=args.timeout_s),
    )


def receive(names, dtypes, shapes):
    """Broadcasts from rank 0 into new tensors, one per name, checked against what is held."""
    staged = state["staged"]
    for name, dt, shape in zip(names, dtypes, shapes):
        held = state["weights"].get(name)
        if dt not in DTYPES:
            raise ValueError(f"{name}: dtype {dt} is not one this server takes")
        # The dtype may differ from the checkpoint's (the server casts on load); the shape not.
        if held is not None and list(held.shape) != list(shape):
            raise ValueError(f"{name}: got {dt}{list(shape)}, holds {held.dtype}{list(held.shape)}")
        if state["weights"] and held is None:
            raise ValueError(f"{name}: not a weight of this model")
        if name in staged:
            raise ValueError(f"{name}: sent twice in one update")
    for name, dt, shape in zip(names, dtypes, shapes):
        t = torch.empty(shape, dtype=DTYPES[dt])
        dist.broadcast(t, src=0)
        staged[name] = t


def commit(version):
    staged, state["staged"] = state["staged"], {}
    missing = [n for n in state["weights"] if n not in staged]
    if missing:
        raise ValueError(f"the update left out {len(missing)} weights, e.g. {missing[0]}")
    state["weights"] = staged
    state["version"] = version
    state["updates"] += 1


def fail(e):
    state["staged"] = {}
    state["errors"].append(str(e).split("\n")[0])
    if dist.is_initialized():
        dist.destroy_process_group()
    return 500, {"success": False, "message": str(e).split("\n")[0]}


def hang():
    stopping.wait()
    return 503, {"success": False, "message": "stopping"}


def sglang_update(b):
    if args.hang:
        return hang()
    receive(b["names"], b["dtypes"], b["shapes"])
    if b.get("weight_version") is not None:
        commit(b["weight_version"])
    return 200, {"success": True, "message": "Succeeded to update parameter online."}


def vllm_update(b):
    if args.hang:
        return hang()
    u = b["update_info"]
    receive(u["names"], u["dtype_names"], u["shapes"])
    return 200, {}


def init_group(i, ok):
    join_group(i["master_address"], i["master_port"], i["rank_offset"], i["world_size"])
    return 200, ok


def by_name(b):
    t = state["weights"].get(b["name"])
    if t is None:
        return 400, {"error": f"no weight {b['name']}"}
    return 200, t[: int(b.get("truncate_size", 100))].tolist()


def from_disk(b):
    state["weights"] = load_dir(b["model_path"])
    state["version"] = b.get("weight_version")
    state["updates"] += 1
    return 200, {"success": True, "message": "Succeeded to update model weights."}


def destroy(_b):
    if dist.is_initialized():
        dist.destroy_process_group()
    return 200, {"success": True, "message": ""}


def fake_state(_b):
    return 200, {
        "version": state["version"],
        "updates": state["updates"],
        "errors": state["errors"],
        "digests": {n: digest(t) for n, t in state["weights"].items()},
    }


SGLANG = {
    "/init_weights_update_group": lambda b: init_group(b, {"success": True, "message": ""}),
    "/update_weights_from_distributed": sglang_update,
    "/destroy_weights_update_group": destroy,
    "/get_weights_by_name": by_name,
    "/update_weights_from_disk": from_disk,
}
VLLM = {
    "/init_weight_transfer_engine": lambda b: init_group(b["init_info"], {}),
    "/start_weight_update": lambda b: (200, {}),
    "/update_weights": vllm_update,
    "/finish_weight_update": lambda b: (commit(None), (200, {}))[1],
}
# Routes that run a collective or change the weights: one at a time.
COLLECTIVE = {"/init_weights_update_group", "/update_weights_from_distributed",
              "/init_weight_transfer_engine", "/update_weights", "/finish_weight_update",
              "/update_weights_from_disk", "/destroy_weights_update_group"}
routes = {**(SGLANG if args.kind == "sglang" else VLLM), "/fake/state": fake_state}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def handle_any(self):
        raw = self.body()
        path = self.path.split("?")[0]
        if path == "/health" and not args.upstream:
            return self.answer(200, {})
        route = routes.get(path)
        if route is None:
            return self.proxy(raw)
        b = json.loads(raw) if raw else {}
        try:
            if path in COLLECTIVE:
                with dist_lock:
                    status, out = route(b)
            else:
                status, out = route(b)
        except Exception as e:  # noqa: BLE001 - every failure is the answer
            with_lock = path in COLLECTIVE
            status, out = fail(e) if with_lock else (500, {"message": str(e)})
        self.answer(status, out)

    def proxy(self, raw):
        if not args.upstream:
            return self.answer(404, {"error": f"no route {self.path}"})
        req = urllib.request.Request(args.upstream + self.path, data=raw or None,
                                     method=self.command)
        if raw:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=3600) as r:
                self.answer(r.status, r.read(), r.headers.get("Content-Type", "application/json"))
        except urllib.error.HTTPError as e:
            self.answer(e.code, e.read())
        except OSError as e:
            self.answer(502, {"error": str(e)})

    do_GET = handle_any
    do_POST = handle_any


if args.model:
    state["weights"] = load_dir(args.model)
server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
server.daemon_threads = True
print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
try:
    threading.Thread(target=lambda: (sys.stdin.read(), stopping.set(), server.shutdown()),
                     daemon=True).start()
    server.serve_forever()
finally:
    stopping.set()
