"""The one-process-per-model baseline of bench_mixed.py: one model behind a minimal aiohttp
server, as a user without SIE would run it (one container per model).

    python bench/reference_server.py --path DIR --kind st|model2vec [--threads 1] [--port 0] [--device cpu]

`--kind st` loads DIR with sentence-transformers (`SentenceTransformer.encode`, batch 32, the
model's own window; float16 on `--device cuda`, as SIE runs there), `--kind model2vec` with
model2vec's `StaticModel.encode`. POST /embed takes
msgpack `{"texts": [...]}` and answers msgpack `{"shape": [n, dims], "vectors": <float32 bytes>}`.
Each request is encoded on its own, one at a time, in a worker thread (the event loop only
parses and answers): a minimal server, no batching across requests. Prints
`listening on http://HOST:PORT` once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
from concurrent.futures import ThreadPoolExecutor


def load_encoder(path: str, kind: str, device: str = "cpu"):
    """texts -> (n, dims) float32 numpy array."""
    import numpy as np

    if kind == "model2vec":
        from model2vec import StaticModel

        model = StaticModel.from_pretrained(path)
        return lambda texts: np.asarray(model.encode(texts), dtype=np.float32)
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path, device=device,
                                model_kwargs={"torch_dtype": torch.float16} if device == "cuda" else None)
    return lambda texts: model.encode(texts, batch_size=32, convert_to_numpy=True).astype(np.float32, copy=False)


def make_app(encode):
    import msgpack
    from aiohttp import web

    worker = ThreadPoolExecutor(max_workers=1)  # one forward at a time, off the event loop

    async def embed(request: web.Request) -> web.Response:
        body = msgpack.unpackb(await request.read())
        texts = body.get("texts") if isinstance(body, dict) else None
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return web.json_response({"error": "body must be msgpack {'texts': [non-empty list of strings]}"},
                                     status=400)
        vectors = await asyncio.get_running_loop().run_in_executor(worker, encode, texts)
        return web.Response(body=msgpack.packb({"shape": list(vectors.shape), "vectors": vectors.tobytes()}),
                            content_type="application/msgpack")

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/embed", embed)
    app.router.add_get("/health", health)
    return app


async def serve(args) -> None:
    from aiohttp import web

    encode = load_encoder(args.path, args.kind, args.device)
    encode(["warm up"])
    runner = web.AppRunner(make_app(encode), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # the port bound when --port is 0
    print(f"listening on http://{args.host}:{port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", required=True)
    parser.add_argument("--kind", choices=("st", "model2vec"), default="st")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
