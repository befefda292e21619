"""The embedding lookup (engine/ops/embed.py, shaders/embed.wgsl): Gather(table, token ids)
with the ids the model's int64 input, on the native device against the float64 numpy engine;
the table gradient bit-reproducible run to run; out-of-range ids clamped on both engines; the
numpy engine against torch's ``F.embedding``; the refusals of other run-time indices."""

import numpy as np
import pytest

from cases import case
from conftest import f32, head, node, rng_for, run
from harness import check_case, one_step

from webgpu_trainer.engine.graph import Graph, GraphError

pytestmark = pytest.mark.every_backend  # the device tests run on every wgpu backend

CLASSES = 4


def _ints(values):
    return {"dtype": "int64", "shape": [len(values)], "values": list(values)}


def lookup_case(id, table_shape, ids, reduce=True):
    """input ids [N, T] -> Gather(table, ids) -> ReduceMean over T (``reduce``) or a Reshape
    to [N, -1] -> Gemm -> LogSoftmax; the table trains."""
    rng = rng_for("embed", id)
    ids = np.asarray(ids)
    table = f32(rng.standard_normal(table_shape))
    inner = int(np.prod(table_shape[1:]))
    feats = inner if reduce else inner * ids.shape[1]
    nodes = [node("Gather", ["table", "input"], ["e"], axis=0)]
    nodes.append(node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=0) if reduce
                 else node("Reshape", ["e", "flat_shape"], ["m"]))
    hn, ht = head("m", feats, CLASSES, rng)
    c = case(f"embed/{id}", nodes + hn, [("table", table, "param")] + ht, f32(ids),
             rng.integers(0, CLASSES, len(ids)), constants={"flat_shape": _ints([0, -1])},
             tag="Gather", acts=("e", "m"), dacts=("e",))
    c.graph["inputs"][0]["dtype"] = "int64"
    return c


# repeats within and across samples, unused rows (zero gradient), an id past the table (9:
# clamped to row 5) in a batch of 3 x 5 tokens
CASES = [lookup_case("mean_over_tokens", (6, 4), [[1, 1, 3, 0, 9], [3, 3, 3, 3, 3],
                                                  [0, 5, 1, 2, 1]]),
         lookup_case("table_3d_flattened", (7, 2, 3), [[6, 0, 6], [2, 2, 4]], reduce=False)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(device, case):
    check_case(device, case)


def test_table_gradient_bit_reproducible(device):
    """Two runs of the same step give the same table gradient bit for bit (no atomics), the
    scatter-add of the device's own dy (768 ids into 16 rows: long chains)."""
    c = lookup_case("repro", (16, 8), np.random.default_rng(3).integers(0, 16, (32, 24)))
    grads = [run(one_step(device, c.graph, c.blob, c.x, c.labels))["grads"]["table"]
             for _ in range(2)]
    assert grads[0].tobytes() == grads[1].tobytes()
    assert np.count_nonzero(grads[0]) > 0
    res = run(one_step(device, c.graph, c.blob, c.x, c.labels))  # dy: the gradient of e
    want = np.zeros((16, 8), np.float32)
    np.add.at(want, c.x.astype(np.int64).reshape(-1), res["dacts"]["e"].reshape(-1, 8))
    np.testing.assert_allclose(res["grads"]["table"], want, rtol=1e-6, atol=1e-7)


def _scaling_ids(shape, rows, seed):
    """Ids of ``shape`` over a table of ``rows``: mostly distinct, with a run of one repeated
    id (a padding-like token), ids scattered repeats across samples and ids past the table."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, rows, shape)
    ids[:, -40:] = 0  # padding at the end of every sample: 40 * N equal ids
    ids[1::3, 5] = ids[0, 5]  # one id repeated across samples
    ids[2, :7] = rows + 3  # past the table: clamped to the last row
    return ids


@pytest.mark.parametrize("shape,rows", [((64, 256), 5000), ((37, 53), 900), ((1, 1), 3)],
                         ids=["64x256", "37x53", "1x1"])
def test_table_gradient_scales(device, shape, rows):
    """The merge-sorted scatter-add for N*T = 64*256 (and a count that is no power of two,
    and one id) against the float64 numpy engine (check_case: forward 1e-5, gradients 1e-4),
    and the table gradient against np.add.at of the device's own dy in float64 (1e-5 of the
    largest): repeats within and across samples, a long run of padding ids, clamped ids."""
    ids = _scaling_ids(shape, rows, 7) if shape[1] > 40 else \
        np.random.default_rng(7).integers(0, rows, shape)
    c = lookup_case(f"scale_{shape[0]}x{shape[1]}", (rows, 4), ids)
    res, _ = check_case(device, c)
    want = np.zeros((rows, 4))
    np.add.at(want, np.minimum(ids, rows - 1).reshape(-1),
              res["dacts"]["e"].reshape(-1, 4).astype(np.float64))
    got = res["grads"]["table"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert np.count_nonzero(np.abs(want).sum(1)) == np.count_nonzero(np.abs(got).sum(1))


def test_out_of_range_id_reads_last_row(device):
    """An id past the table is the last row in the forward (both engines) and its gradient
    goes to the last row."""
    c = CASES[0]
    res = run(one_step(device, c.graph, c.blob, c.x, c.labels))
    table = res["P"]["table"]
    np.testing.assert_array_equal(res["acts"]["e"][0, 4], table[5])
    clean = lookup_case("mean_over_tokens", (6, 4), [[1, 1, 3, 0, 5], [3, 3, 3, 3, 3],
                                                     [0, 5, 1, 2, 1]])
    res2 = run(one_step(device, clean.graph, clean.blob, clean.x, clean.labels))
    np.testing.assert_array_equal(res["grads"]["table"], res2["grads"]["table"])


def test_numpy_engine_matches_torch():
    """cpu/gather.py's lookup (ids clamped) against ``F.embedding`` in float64."""
    torch = pytest.importorskip("torch")
    from webgpu_trainer.cpu import gather as cpu_gather
    rng = np.random.default_rng(0)
    table = rng.standard_normal((9, 5))
    ids = np.array([[0, 8, 8, 3], [12, 3, 3, 1]])
    n = {"name": "/emb/Gather", "op_type": "Gather", "inputs": ["table", "x"],
         "outputs": ["y"], "attrs": {"axis": 0}}
    ctx = type("Ctx", (), {"input": "x"})()
    (y,), _ = cpu_gather.forward(n, [table, ids.astype(np.float64)], ctx)
    tt = torch.tensor(table, requires_grad=True)
    yt = torch.nn.functional.embedding(torch.tensor(np.minimum(ids, 8)), tt)
    np.testing.assert_array_equal(y, yt.detach().numpy())
    dy = rng.standard_normal(y.shape)
    yt.backward(torch.tensor(dy))
    dt, di = cpu_gather.backward(n, [table, ids], [y], None, [dy], ctx)
    assert di is None
    np.testing.assert_allclose(dt, tt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_refuses_run_time_indices_that_are_not_token_ids():
    """A float input as Gather indices, and token ids read by another op, are refused naming
    the node, before any GPU work."""
    g = dict(CASES[0].graph)
    g["inputs"] = [dict(g["inputs"][0], dtype="float32")]
    with pytest.raises(GraphError, match=r"node .* \(Gather\): input 1 'input' \(indices\) "
                                         r"is not a constant of the model; only constant "
                                         r"indices or the model's token ids input"):
        Graph(g).shapes(2)
    g = dict(CASES[0].graph)
    g["nodes"] = g["nodes"] + [node("Relu", ["input"], ["r"])]
    with pytest.raises(GraphError, match=r"\(Relu\) reads the token ids input 'input'; only "
                                         r"a Gather's indices may"):
        Graph(g).shapes(2)
