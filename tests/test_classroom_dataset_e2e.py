"""A class session pinning a dataset, in headless Chromium against the real ``webgpu-trainer
classroom`` server (issue 18, "In the page": the classroom): the teacher creates the session in
the dashboard's dialog with a small prepared dataset ("bands": 3 classes of 1x28x28, 40
training images, tests/test_classroom_dataset.py) and the tiny MLP, and the dashboard names
the dataset; a student joins, the page takes the pinned dataset (picker locked), trains 4
steps, reported to the teacher; a second run loads the same shards from the browser's HTTP cache
(the worker's Resource Timing: bytes over the network the first time, none the second): the
dataset downloads once. Screenshots in test-results/classroom/dataset-*.png."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import ssl
import subprocess

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from dataset_fixtures import write_image_dataset
from e2e_fixtures import CHROMIUM, CHROMIUM_ARGS
from test_classroom_dataset import TEST, TRAIN, tiny_grey
from test_classroom_e2e import TOKEN, TRAIN_S, Server, js_wait, open_page, shoot, student

pytestmark = pytest.mark.e2e

STEPS = 4
SHARDS = """() => performance.getEntriesByType('resource')
  .filter(e => e.name.includes('/data/bands/') && !e.name.endsWith('manifest.json'))
  .map(e => [e.name.split('/').pop(), e.transferSize])"""


@contextlib.contextmanager
def bands_server(tmp, mnist_cache):
    """The classroom server in ``tmp`` with ``--data-root`` holding the "bands" dataset."""
    write_image_dataset(tmp / "datasets", "bands", {"train": tiny_grey(TRAIN, 0),
                                                    "test": tiny_grey(TEST, 1)},
                        ["top", "middle", "bottom"], title="Bands")
    srv = Server(tmp, mnist_cache, ["--data-root", str(tmp / "datasets")])
    srv.start()
    try:
        yield srv
    finally:
        if srv.proc.poll() is None:
            srv.proc.terminate()
            try:
                srv.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:  # a stream still open: no clean stop
                srv.kill()


@pytest.fixture(scope="module")
def server(mnist_cache, tmp_path_factory):
    with bands_server(tmp_path_factory.mktemp("classroom-data"), mnist_cache) as srv:
        yield srv


def spki(pem: str) -> str:
    """base64 of the sha256 of a certificate's SubjectPublicKeyInfo (Chromium's pin format)."""
    key = x509.load_pem_x509_certificate(pem.encode()).public_key()
    der = key.public_bytes(serialization.Encoding.DER,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@pytest.fixture(scope="module")
def class_browser(server):
    """Chromium trusting the class's certificate, as a student's browser with the class CA
    installed (the teacher page's instructions): Chromium keeps no HTTP cache for a page whose
    certificate it does not trust, so a student who clicked through the warning downloads the
    dataset at every run."""
    pins = [spki(ssl.get_server_certificate(("127.0.0.1", server.port))),
            spki((server.tmp / "state" / "tls" / "ca.pem").read_text())]
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=[
            *CHROMIUM_ARGS, f"--ignore-certificate-errors-spki-list={','.join(pins)}"])
        try:
            yield b
        finally:
            b.close()


def run_once(page, run: int) -> None:
    try:
        js_wait(page, "!document.getElementById('start').disabled", 60, "Start enabled")
    except BaseException:
        print(page.evaluate("[...document.querySelectorAll('.field-error:not([hidden]), "
                            ".settings-errors, #error')].map(e => e.textContent)"))
        raise
    page.click("#start")
    js_wait(page, f"window.classroomState.run === {run} && "
                  "['done', 'error'].includes(appState.phase)", TRAIN_S, f"run {run}")
    assert page.evaluate("appState.phase") == "done", "\n".join(page.console[-20:])


def test_session_pins_a_dataset_downloaded_once(class_browser, server):
    pages = []
    try:
        check_class(class_browser, server, pages)
    finally:
        for p in pages:
            p.context.close()


def check_class(class_browser, server, pages: list) -> None:
    """The test's steps; the pages it opens go to ``pages`` (closed by the caller)."""
    teacher = open_page(class_browser, f"{server.url}/teacher#token={TOKEN}")
    pages.append(teacher)
    teacher.wait_for_selector("#new-session", state="visible", timeout=60000)
    teacher.click("#new-session")
    teacher.fill("#s-name", "Bands class")
    assert teacher.eval_on_selector("#s-dataset", "s => [...s.options].find(o => o.value === "
                                    "'bands').textContent") == "Bands (bands)"
    teacher.select_option("#s-dataset", "bands")
    teacher.select_option("#s-model", "mlp-ts17")
    for k, v in {"batch_size": 8, "max_steps": STEPS, "eval_images": TEST}.items():
        teacher.fill(f"#s-{k}", str(v))
    teacher.click("#session-form button[type=submit]")
    js_wait(teacher, "window.teacherState.session?.name === 'Bands class' && "
                     "window.teacherState.connected", 60, "the new session")
    sid = teacher.evaluate("window.teacherState.session.id")
    assert teacher.text_content("#session-dataset") == \
        f"Dataset: Bands (1x28x28, 3 classes, {TRAIN} training images) · locked for students"
    session = server.api("GET", f"/api/classroom/sessions/{sid}", headers=server.teacher).json()
    assert session["config"]["dataset"] == "bands" and "dataset" in session["pinned"]

    page = student(class_browser, server, sid, "Ada")
    pages.append(page)
    js_wait(page, "window.appState.dataset?.name === 'bands' && "
                  "document.getElementById('dataset').disabled", 60, "the pinned dataset")
    assert page.text_content("#tagline") == "Train a neural network on Bands on your GPU, " \
                                            "in the browser"
    run_once(page, 1)
    worker = page.workers[0]
    first = worker.evaluate(SHARDS)
    assert len(first) == 4 and all(size > 0 for _, size in first), first  # downloaded
    run_once(page, 2)
    again = worker.evaluate(SHARDS)[len(first):]
    # the same 4 shards, none over the network: the browser's cache answered
    assert sorted(n for n, _ in again) == sorted(n for n, _ in first), again
    assert all(size == 0 for _, size in again), again
    js_wait(page, "window.classroomState.modelSent", 60, "the report")
    # the dashboard shows run 1 finished until run 2's report arrives: wait for run 2 itself
    row = js_wait(teacher, "[...window.teacherState.roster.values()].find(r => r.name === 'Ada'"
                           f" && r.run === 2 && r.state === 'finished' && r.step === {STEPS})",
                  60, "Ada's second run, finished, on the dashboard")
    assert row["client_state"] == "done", row
    shoot(teacher, "dataset-teacher", 1280, 800)
    shoot(page, "dataset-student", 1280, 800)
