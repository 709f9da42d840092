"""Which events of a training loop are its steps, and how many samples each step holds.

The harness tells the step clock of every event that may end a step: a call of the model, a
``backward()``, an optimizer step, a batch of a data loader, the script's own ``autotune.step()``.
One kind delimits the steps: the first seen, until a stronger one takes over (:data:`SOURCES`,
weakest first), with the exceptions a loop's shape calls for (:meth:`StepSources.takes_over`).
"""

from __future__ import annotations

#: What marks a step, weakest first: a call of the model, ``Tensor.backward()``, an optimizer step,
#: a batch of a data loader, the script's own ``autotune.step()``.
SOURCES = ("forward", "backward", "optimizer", "loader", "explicit")


class StepSources:
    """What the events seen so far say of the loop, whichever kind delimits its steps."""

    def __init__(self) -> None:
        #: The leading dimension of the model's latest input: the samples of a step that no
        #: loader delimits.
        self.model_samples: float | None = None
        #: The samples of the latest batch a loader gave the loop: those of an optimizer step when
        #: the model is called in a way no hook sees (``module.forward(x)``).
        self.batch_samples: float | None = None
        #: The loop has trained (a ``backward()`` or an optimizer step was seen): from then on a
        #: batch taken with gradients off is an evaluation's, not a step.
        self.trained = False
        #: Optimizer steps since the last batch of a loader (:meth:`takes_over`).
        self.optimizer_steps_since_batch = 0
        #: The optimizer took over from a loader that only gave the loop its data once; the loader
        #: never delimits the steps again.
        self.loader_demoted = False

    def see(self, source: str, samples: float | None) -> None:
        """An event of ``source`` on the training thread, with the samples it carries."""
        if source == "loader":
            self.optimizer_steps_since_batch = 0
            if samples is not None:
                self.batch_samples = float(samples)
        elif source == "optimizer":
            self.optimizer_steps_since_batch += 1
        if source in ("backward", "optimizer"):
            self.trained = True
        if source == "forward" and samples is not None:
            self.model_samples = float(samples)

    def samples(self, last: float | None) -> float:
        """The samples of a step whose event carries none (an optimizer step, a ``backward()``):
        those of the model's latest input (the loop slices its own tensors, or made them once),
        else of the latest batch, else of the step before (``last``)."""
        return self.model_samples or self.batch_samples or (last if last is not None else 1.0)

    def takes_over(self, source: str, current: str | None, warming: bool) -> bool:
        """Whether steps of ``source`` replace those of ``current``, the source that delimits them
        now (``warming``: the loop is still warming up)."""
        if source == "loader" and self.loader_demoted:
            return False
        if source == "optimizer" and current == "loader" and self.optimizer_steps_since_batch >= 2:
            # The optimizer steps again and again with no batch between: the loader only gave the
            # loop its data (one batch taken with next(iter(loader)), trained on for many steps).
            self.loader_demoted = True
            return True
        if source == "explicit" or current == "forward":
            # The script marks its own steps, or a training loop shows that the model's calls
            # were not the steps (an evaluation between epochs calls the model too).
            return True
        if SOURCES.index(source) < SOURCES.index(current or "forward"):
            return False
        if current == "backward" and source == "optimizer":
            # Several backward() calls can make one step (a GAN's three, gradient accumulation):
            # an optimizer that steps is the loop's step, however late it shows up.
            return True
        # A spawned worker's loop is known by its first backward(), so its first optimizer step
        # can come before its first batch is seen; batches carry their sample counts.
        return source == "loader" and warming
