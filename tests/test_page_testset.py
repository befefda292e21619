"""The page's test images come from the worker, never from a second download (web/page/
testset.js, worker/views.py ``test_images``).

One page: the Kernels tab's test image 7, Try it's test image 5, a 3-step run and the Results'
wrong guesses, each checked against the MNIST test split read by numpy. Every request the page
and its worker make is recorded (Playwright's request events; a worker's requests cannot be
told from the page's there): the worker's loads (``prepare``'s and the run's) fetch the
training and the test split together, so the test split is requested exactly as often as the
training split; a page fetching the test split itself adds test requests only. The page's own
resource timeline (which holds none of the worker's fetches) lists no test shard.
Screenshot: testset-results-1280.
"""

import numpy as np
import pytest
from e2e_fixtures import Page, run_training, screenshot

pytestmark = pytest.mark.e2e

TEST_URL, TRAIN_URL = "/data/mnist/test-images-", "/data/mnist/train-images-"
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def mnist_test(mnist_cache):
    from webgpu_trainer.host import data
    return data.load(mnist_cache, "test")


def _canvas_grey(page, selector):
    return page.evaluate("""(sel) => {
        const c = document.querySelector(sel);
        return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)
            .filter((_, k) => k % 4 === 0);
    }""", selector)


def test_kernels_try_it_and_results_use_the_workers_test_split(chromium, server, mnist_test):
    images, labels = mnist_test
    app = Page(chromium, server)
    urls = []
    app.context.on("request", lambda r: urls.append(r.url))
    try:
        pg = app.page
        app.wait_ready()
        app.configure(optimizer="adam", lr="0.01", batch=32, epochs=1, max_steps=3,
                      eval_images=64, val_images=64)  # (not the default 5,000: ~20 s)
        # Kernels: test image 7, as numpy reads it
        pg.click("#tab-kernels")
        pg.fill("#kernel-digit", "7")
        pg.click("#kernel-digit-load")
        pg.wait_for_function("window.kernelsState.error || (window.kernelsState.result && "
                             "window.kernelsState.result.width === 28 && "
                             "document.querySelector('#kernel-image-note').textContent"
                             ".includes('#7'))", timeout=WAIT_MS)
        assert pg.evaluate("window.kernelsState.error") is None
        pixels = pg.evaluate("Array.from(window.kernelsState.result.pixels)")
        np.testing.assert_allclose(np.asarray(pixels, np.float32).reshape(28, 28),
                                   images[7].reshape(28, 28) / 255.0, atol=1e-7)
        assert f"(a {labels[7]})" in pg.text_content("#kernel-image-note")
        # Try it: test image 5
        pg.click("#tab-try")
        pg.fill("#try-index", "5")
        pg.dispatch_event("#try-index", "change")
        pg.wait_for_function("window.tryState.probs && window.tryState.index === 5",
                             timeout=WAIT_MS)
        assert pg.evaluate("window.tryState.input") == images[5].reshape(-1).tolist()
        assert f"labelled {labels[5]}" in pg.text_content("#try-source")
        # a short run: the Results' wrong guesses drawn from the worker's split
        run_training(app, 3, 300, "testset")
        pg.click("#tab-results")
        pg.wait_for_selector("#evaluation[data-images=drawn]", timeout=WAIT_MS)
        first = int(pg.get_attribute("#wrong-grid button.wrong", "data-index"))
        drawn = _canvas_grey(pg, "#wrong-grid canvas")
        np.testing.assert_array_equal(np.asarray(drawn).reshape(28, 28), images[first])
        screenshot(pg, "testset-results-1280")
        own = pg.evaluate("performance.getEntriesByType('resource').map((e) => e.name)"
                          ".filter((n) => n.includes('/data/mnist/test-'))")
    finally:
        app.close()
    test = [u for u in urls if TEST_URL in u]
    train = [u for u in urls if TRAIN_URL in u]
    assert len(train) >= 2, train  # prepare's load and the run's
    assert len(test) == len(train), (test, train)
    assert own == [], own
