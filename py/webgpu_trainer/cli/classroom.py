"""``webgpu-trainer classroom``: serve the page to a class over HTTPS, with sessions, a teacher
dashboard and durable results (``host/classroom/``).

Bound to 127.0.0.1 unless ``--host 0.0.0.0`` (every interface) is given. Prints the teacher's
URL (with the teacher token, when it is new or given: only its hash is stored) and, for each
LAN address, the join URL of the open session with a QR code of the first.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .paths import add_serving_args

TOKEN_ENV = "WEBGPU_TRAINER_TEACHER_TOKEN"


def add_classroom(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("classroom", help="serve a class over HTTPS: sessions, join URLs + QR, "
                                         "teacher dashboard, results in a database")
    p.add_argument("--host", default="127.0.0.1",
                   help="bind address (default 127.0.0.1: this machine only; 0.0.0.0 lets "
                        "the class in)")
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8443)),
                   help="port (default $PORT or 8443)")
    p.add_argument("--db", default=None,
                   help="database URL (default SQLite in the state folder; e.g. "
                        "postgresql+psycopg://user@host/db)")
    p.add_argument("--state-dir", type=Path, default=None,
                   help="classroom folder: database, submitted models, certificates "
                        "(default <repo>/.cache/classroom)")
    add_serving_args(p)
    p.add_argument("--no-tls", action="store_true",
                   help="plain http (WebGPU then works only on this machine's localhost)")
    p.add_argument("--cert", type=Path, default=None, help="your own certificate (PEM chain)")
    p.add_argument("--key", type=Path, default=None, help="its private key (PEM)")
    p.add_argument("--teacher-token", default=os.environ.get(TOKEN_ENV),
                   help=f"the teacher token (default ${TOKEN_ENV}, else the stored one, "
                        "else a new one); only its salted hash is stored")
    p.add_argument("--new-teacher-token", action="store_true",
                   help="make a new teacher token and print its dashboard link (the old "
                        "link stops working)")
    p.add_argument("--model", default="seednet",
                   help="model of the session made at start when none is open")
    p.add_argument("--workers", type=int, default=1,
                   help="server processes behind the one address (use with --db postgresql "
                        "or the SQLite default)")
    return p


def _print_start(urls, teacher_url, tls, sess, loopback) -> None:
    from ..host.classroom.tls import qr_terminal
    print(f"webgpu-trainer classroom: {'https' if tls else 'http'} (Ctrl+C to stop)")
    if teacher_url:
        print(f"\n  Teacher dashboard (keep this link to yourself):\n    {teacher_url}\n")
    else:
        print("\n  Teacher dashboard: the link printed at the first start still works (this "
              "server keeps only a hash of its token, so it cannot print it again).\n  Lost "
              "it? Restart with --new-teacher-token for a new link (the old one then stops "
              "working).\n")
    print(f"  Session {sess['name']!r}: students open")
    for u in urls:
        print(f"    {u}/?class={sess['id']}")
    print(qr_terminal(f"{urls[0]}/?class={sess['id']}"))
    if loopback:
        print("  Bound to this machine only: add --host 0.0.0.0 to let the class in.")
    if tls["ca"]:
        print(f"  HTTPS with this machine's own certificate authority ({tls['ca']}),\n"
              f"  SHA-256 {tls['ca_sha256']}.\n  Students either trust it once (steps on the "
              "teacher page) or click Advanced -> Proceed.")
    elif not tls["on"]:
        print("  Plain http: browsers show WebGPU only on secure origins, so students on other\n"
              "  machines get no GPU. Drop --no-tls to serve HTTPS.")
    sys.stdout.flush()


def classroom(args) -> int:
    import uvicorn

    from ..host.classroom import app as app_mod, tls as tls_mod
    from ..host.classroom.config import PINNABLE, check_config
    from ..host.classroom.store import Store
    from .paths import prepare_serving

    ready = prepare_serving(args.data_dir, args.source)
    if ready is None:
        return 1
    root, data_dir, wheels_dir = ready
    state_dir = args.state_dir or root / ".cache" / "classroom"
    models_dir = args.models_dir or root / "models"
    tls = {"on": not args.no_tls, "ca": None, "ca_sha256": None}
    cert = key = None
    if args.cert or args.key:
        if not (args.cert and args.key):
            print("error: --cert and --key go together", file=sys.stderr)
            return 2
        cert, key = args.cert, args.key
    elif tls["on"]:
        made = tls_mod.ensure_certificate(state_dir / "tls", tls_mod.lan_addresses())
        cert, key, tls["ca"], tls["ca_sha256"] = made["cert"], made["key"], made["ca"], \
            made["ca_sha256"]
    urls = tls_mod.base_urls(args.host, args.port, tls["on"])
    db_url = args.db or app_mod.default_db(state_dir)

    store = Store(db_url, state_dir)
    token = store.teacher_token(args.teacher_token, renew=args.new_teacher_token)
    sess = next((s for s in store.sessions() if s["open"]), None)
    if sess is None:
        names = {p.stem for p in models_dir.glob("*.onnx")}
        model = args.model if args.model in names else (sorted(names) or ["seednet"])[0]
        sid = store.create_session("Class", check_config({"model": model}),
                                   [k for k in PINNABLE if k != "seed"])
        sess = store.session(sid)
    store.close()

    kwargs = dict(models_dir=models_dir, uploads_dir=args.uploads_dir, data_dir=data_dir,
                  data_root=args.data_root,
                  wheels_dir=wheels_dir, state_dir=state_dir, db_url=db_url, base_urls=urls,
                  ca_path=tls["ca"] and str(tls["ca"]), ca_sha256=tls["ca_sha256"],
                  teacher_token=token)
    scheme = "https" if tls["on"] else "http"
    loopback = args.host in ("127.0.0.1", "localhost", "::1")
    here = "127.0.0.1" if args.host in ("0.0.0.0", "::", "", "localhost") else args.host
    here = f"[{here}]" if ":" in here else here
    _print_start(urls, token and f"{scheme}://{here}:{args.port}/teacher#token={token}", tls,
                 sess, loopback)
    ssl = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)} if cert else {}
    common = dict(host=args.host, port=args.port, log_level="warning", timeout_keep_alive=30,
                  limit_concurrency=2000, **ssl)
    if args.workers > 1:
        os.environ[app_mod.ENV] = app_mod.env_args(root=root, **kwargs)
        uvicorn.run("webgpu_trainer.host.classroom.app:from_env", factory=True,
                    workers=args.workers, **common)
    elif cert:  # plain http on this port gets a redirect to https (host/classroom/https_only)
        from ..host.classroom.https_only import server
        server(uvicorn.Config(app_mod.create_classroom_app(root, **kwargs), **common)).run()
    else:
        uvicorn.run(app_mod.create_classroom_app(root, **kwargs), **common)
    return 0


COMMANDS = {"classroom": (add_classroom, classroom)}
