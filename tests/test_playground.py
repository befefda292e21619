"""The kernels playground's filter (engine/tools/playground.py: the engine's Conv through a Plan) on
the native GPU, every wgpu backend, against a float64 numpy cross-correlation with zero
padding written here (ONNX Conv; no scipy): each preset kernel and a random one on a
non-square image, within PLAYGROUND_ATOL. Also the request checks and GET /api/kernels."""

import numpy as np
import pytest

from conftest import PLAYGROUND_ATOL, rng_for, run
from webgpu_trainer.engine.tools import playground

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

HEIGHT, WIDTH = 37, 61  # non-square, neither a multiple of the kernel's 4-column blocks


def correlate(image, kernel):
    """out[i, j] = sum_ab kernel[a, b] * image[i + a - 1, j + b - 1], zeros outside: float64."""
    x = np.pad(np.asarray(image, np.float64), 1)
    k = np.asarray(kernel, np.float64).reshape(3, 3)
    h, w = x.shape[0] - 2, x.shape[1] - 2
    return sum(k[a, b] * x[a:a + h, b:b + w] for a in range(3) for b in range(3))


def assert_near(got, want, what):
    err = float(np.abs(np.float64(got) - want).max())
    assert err <= PLAYGROUND_ATOL, f"{what}: max |GPU - numpy| {err:.3g} > {PLAYGROUND_ATOL:g}"


def filtered(flt, image, kernel):
    h, w = image.shape
    out = run(flt.convolve(w, h, np.float32(image).tobytes(), list(kernel)))
    return np.frombuffer(out, np.float32).reshape(h, w)


KERNELS = [(p["id"], p["weights"]) for p in playground.PRESETS] + [
    ("random", [float(v) for v in rng_for("playground", "kernel").standard_normal(9)])]


@pytest.fixture(scope="module")
def image():
    return rng_for("playground", "image").random((HEIGHT, WIDTH)).astype(np.float32)


@pytest.mark.parametrize("kid,kernel", KERNELS, ids=[k for k, _ in KERNELS])
def test_filter_equals_numpy_correlation(device, image, kid, kernel):
    flt = playground.Filter(device)
    got = filtered(flt, image, kernel)
    assert_near(got, correlate(image, kernel), f"{kid} on {WIDTH}x{HEIGHT}")


def test_plans_are_reused_per_size(device, image):
    """A second kernel on the same size reuses the plan (new weights, same buffers); a new
    size gets its own; the oldest goes after PLANS_KEPT sizes."""
    flt = playground.Filter(device)
    sobel = playground.PRESETS[1]["weights"]
    first = filtered(flt, image, sobel)
    plan = flt.plans[(HEIGHT, WIDTH)]
    blur = playground.PRESETS[0]["weights"]
    assert_near(filtered(flt, image, blur), correlate(image, blur), "blur after sobel")
    assert flt.plans[(HEIGHT, WIDTH)] is plan
    small = image[:5, :3]
    assert_near(filtered(flt, small, sobel), correlate(small, sobel), "3x5")
    assert np.array_equal(filtered(flt, image, sobel), first), "the same request twice"
    for side in range(1, playground.PLANS_KEPT + 1):
        filtered(flt, image[:side, :side], sobel)
    assert len(flt.plans) == playground.PLANS_KEPT and (HEIGHT, WIDTH) not in flt.plans


@pytest.mark.parametrize("width,height,nbytes,kernel,needle", [
    (0, 4, 0, [0] * 9, "width must be a whole number from 1 to 256, not 0"),
    (4, 257, 4 * 4 * 257, [0] * 9, "height must be a whole number from 1 to 256, not 257"),
    (4.0, 4, 64, [0] * 9, "width must be a whole number"),
    (4, 4, 60, [0] * 9, "pixels: 60 bytes for a 4x4 image (expected 64"),
    (4, 4, 64, [0] * 8, "kernel must be 9 numbers"),
    (4, 4, 64, [0] * 4 + [float("nan")] + [0] * 4, "row 2, column 2: nan is not a finite"),
    (4, 4, 64, [0] * 8 + ["1"], "row 3, column 3: '1' is not a finite number"),
])
def test_bad_requests_are_refused_naming_the_problem(device, width, height, nbytes, kernel,
                                                    needle):
    flt = playground.Filter(device)
    with pytest.raises(ValueError) as err:
        run(flt.convolve(width, height, bytes(nbytes), kernel))
    assert needle in str(err.value)
    assert not flt.plans, "nothing built for a bad request"


def test_kernels_route_serves_the_presets(tmp_path):
    from starlette.testclient import TestClient

    from webgpu_trainer.host import server
    (tmp_path / "web").mkdir()
    c = TestClient(server.create_app(tmp_path, tmp_path / "models", tmp_path / "mnist",
                                     tmp_path / "wheels"))
    body = c.get("/api/kernels").json()
    assert body == {"presets": playground.PRESETS, "max_side": playground.MAX_SIDE}
    assert [p["id"] for p in body["presets"]] == ["blur", "sobel_x", "sobel_y", "laplacian",
                                                  "sharpen"]
    assert all(len(p["weights"]) == 9 and p["about"] for p in body["presets"])
