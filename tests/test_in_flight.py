"""GpuEngine.IN_FLIGHT: how many submitted steps ``step`` leaves unfinished (the browser's
queue depth). The device here is a recorder whose fences the test completes by hand, so the
test sees which step each ``step`` call waited for; the GPU path itself is covered by every
training test (IN_FLIGHT's default)."""

import asyncio
from types import SimpleNamespace

import pytest

from webgpu_trainer.engine.train.gpu_engine import GpuEngine


class FenceDevice:
    """``run_step`` returns a future per step, finished only by ``finish(t)``."""

    def __init__(self):
        self.fences = []

    def run_step(self, program, uniform, data):
        self.fences.append(asyncio.get_running_loop().create_future())
        return self.fences[-1]

    def finish(self, t: int):
        self.fences[t - 1].set_result(None)


def engine(dev, depth: int) -> GpuEngine:
    eng = GpuEngine(dev)
    eng.IN_FLIGHT = depth
    eng.train_program, eng.seed = object(), 0
    eng.plan = SimpleNamespace(step=object())
    eng.opt = SimpleNamespace(scalars=lambda t, lr: (0.0,) * 3)
    return eng


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_step_returns_once_the_step_depth_before_finished(depth):
    async def go():
        dev = FenceDevice()
        eng = engine(dev, depth)
        for t in range(1, 8):
            task = asyncio.ensure_future(eng.step(t, 0, 0.1))
            await asyncio.sleep(0)
            waits_for = t - depth + 1  # the step this call may not return before
            if waits_for < 1:
                assert task.done(), f"step {t} waited with {t} < {depth} submitted"
                continue
            for earlier in range(1, waits_for):
                assert dev.fences[earlier - 1].done()
            assert not task.done(), f"step {t} returned before step {waits_for} finished"
            dev.finish(waits_for)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            assert task.done(), f"step {t} still waiting after step {waits_for} finished"
            await task
        assert len(dev.fences) == 7
        assert len(eng._in_flight) == min(depth - 1, 7)

    asyncio.run(go())


def test_forget_fences_then_waits_only_for_later_steps():
    async def go():
        dev = FenceDevice()
        eng = engine(dev, 3)
        await eng.step(1, 0, 0.1)
        await eng.step(2, 0, 0.1)  # 1 and 2 unfinished: a read would wait for both
        eng.forget_fences()
        task = asyncio.ensure_future(eng.step(3, 0, 0.1))
        await asyncio.sleep(0)
        assert task.done()  # nothing older than the forgotten fences is awaited
        await eng.step(4, 0, 0.1)  # would wait for step 2, forgotten
        task = asyncio.ensure_future(eng.step(5, 0, 0.1))
        await asyncio.sleep(0)
        assert not task.done()  # waits for step 3
        dev.finish(3)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert task.done()

    asyncio.run(go())


def test_zero_or_negative_depth_waits_for_each_step_itself():
    async def go():
        dev = FenceDevice()
        eng = engine(dev, 0)
        task = asyncio.ensure_future(eng.step(1, 0, 0.1))
        await asyncio.sleep(0)
        assert not task.done()
        dev.finish(1)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert task.done()

    asyncio.run(go())


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bench_refuses_a_depth_that_is_not_a_positive_integer(bad):
    from webgpu_trainer.worker import bench
    trainer = SimpleNamespace(engine=engine(FenceDevice(), 2), cfg={"batch_size": 1},
                              per_epoch=1)
    with pytest.raises(ValueError, match=r"in_flight must be an integer >= 1, got"):
        asyncio.run(bench.bench(trainer, FenceDevice(), {"in_flight": bad}))
