"""What a finished run's numbers mean, in words (standard library only: runs in Pyodide).

``verdict(...)`` turns the result of ``train.Trainer.run`` into ``{"verdict", "reason"}``:

- ``"diverged"``: the training loss exploded without becoming NaN or infinite (that case is
  ``train.TrainingDiverged``): the mean loss of the last ``LAST_STEPS`` steps is more than
  ``DIVERGED_FACTOR`` times the loss of the run's first step;
- ``"stopped"``: Stop ended the run before its last step (the numbers are those of a partly
  trained model);
- ``"chance"``: the test accuracy is at most ``CHANCE_FACTOR`` times what guessing gets
  (1 / classes): the model learned nothing useful;
- ``"ok"``: none of these.

The checks run in that order; each reason names the numbers it is based on. ``lower_lr``
is the advice's lower learning rate (also in ``train.TrainingDiverged``'s message).
"""

from ..config.schema import BY_NAME, OPTIMIZERS, default_for

DIVERGED_FACTOR = 10.0  # final / first training loss above this: the loss exploded
CHANCE_FACTOR = 1.5     # test accuracy <= this x (1 / classes): no better than guessing
LAST_STEPS = 10         # the final training loss: the mean over this many last steps
ROSE, FELL = 1.05, 0.9  # chance-level advice: final / first loss above ROSE rose, above FELL
                        # barely fell


def lower_lr(lr: float, optimizer: str) -> str:
    """The advice after ``lr`` diverged (or made the loss rise) with ``optimizer``: a tenth of
    it, but never above torch's default learning rate of that optimizer, e.g. "e.g. 0.001,
    torch's default for Adam" for Adam at lr 1e6 (a tenth, 1e5, would diverge too) and
    "e.g. 0.0005" for Adam at lr 0.005."""
    default = default_for(BY_NAME["lr"], optimizer)
    if lr / 10 < default:
        return f"e.g. {lr / 10:g}"
    return f"e.g. {default:g}, torch's default for {OPTIMIZERS.get(optimizer, optimizer)}"


def verdict(*, test_acc: float, classes: int, eval_images: int, first_loss: float | None,
            last_loss: float | None, steps: int, total_steps: int, stopped: bool, lr: float,
            optimizer: str) -> dict:
    """``{"verdict": "ok" | "diverged" | "chance" | "stopped", "reason": str}`` of a run.

    ``test_acc``: fraction 0..1 on ``eval_images`` test images; ``classes``: what guessing
    chooses among (the dataset's classes, at most the model's outputs); ``first_loss``: the
    training loss of the run's first step, ``last_loss``: the mean of its last steps (None: no
    step ran); ``steps`` of ``total_steps`` done; ``stopped``: Stop
    ended it; ``lr`` and ``optimizer`` name the settings in the advice."""
    guess = 1.0 / max(classes, 1)
    acc = (f"test accuracy {100 * test_acc:.1f}% on {eval_images:,} test image"
           f"{'s' if eval_images != 1 else ''}")
    if first_loss is not None and last_loss is not None and first_loss > 0 \
            and last_loss > DIVERGED_FACTOR * first_loss:
        return {"verdict": "diverged",
                "reason": f"training diverged: the training loss rose from {first_loss:.4g} "
                          f"(step 1) to {last_loss:.4g} (the last steps), {acc}. Try a lower "
                          f"learning rate (now {lr:g} with {optimizer}, "
                          f"{lower_lr(lr, optimizer)}) or gradient clipping."}
    if stopped:
        return {"verdict": "stopped",
                "reason": f"stopped at step {steps:,} of {total_steps:,}: {acc} measures the "
                          "model as it was then."}
    if test_acc <= CHANCE_FACTOR * guess:
        trend = first_loss is not None and last_loss is not None and steps >= 2
        if trend and last_loss > ROSE * first_loss:
            advice = (f"the training loss rose ({first_loss:.4g} at step 1, {last_loss:.4g} "
                      f"at the end): try a lower learning rate (now {lr:g} with {optimizer}, "
                      f"{lower_lr(lr, optimizer)})")
        elif trend and last_loss > FELL * first_loss:
            advice = (f"the training loss barely fell ({first_loss:.4g} at step 1, "
                      f"{last_loss:.4g} at the end): train longer or raise the learning rate "
                      f"(now {lr:g} with {optimizer})")
        elif trend:
            advice = (f"the training loss fell ({first_loss:.4g} at step 1, {last_loss:.4g} at "
                      f"the end) but after {steps:,} steps that does not show on the test "
                      "images yet: train longer")
        else:
            advice = (f"after {steps:,} step{'s' if steps != 1 else ''} with {optimizer} at "
                      f"learning rate {lr:g} the model has hardly trained: train longer")
        return {"verdict": "chance",
                "reason": f"{acc} is no better than guessing ({100 * guess:.0f}% for "
                          f"{classes} classes); {advice}."}
    return {"verdict": "ok",
            "reason": f"{acc} (guessing would get {100 * guess:.0f}%)."}
