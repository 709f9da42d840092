"""Which optimizer's steps are the training loop's steps, for the step clock.

At first the first optimizer that stepped: a GAN steps two optimizers per iteration, and a script
that makes its optimizer anew (each epoch) makes it over the same parameters, so an optimizer is
known by its first parameter. Another optimizer that steps twice in a row takes over: the loop has
moved on to it (the layers of a forward-forward net train one after the other, each with an
optimizer of its own), and the run is in a new phase, unless one that handed over steps again
later (a loop that steps its optimizers in turn, one of them several times).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

from autotune.harness.timing.step_clock import StepClock, TimedTrial

if TYPE_CHECKING:
    import torch
    from torch.optim.optimizer import Args, Kwargs


class OptimizerSteps:
    """The optimizers of the script that ``trial`` runs, told to its ``clock``: each one made (an
    optimizer that has not stepped yet means a later phase), each step's start and end (what runs
    inside a step, as LBFGS's closure calls, is one step), and which of them delimit the steps."""

    def __init__(self, trial: TimedTrial, clock: StepClock) -> None:
        self.trial = trial
        self.clock = clock
        #: The first parameter of the optimizer whose steps are the loop's.
        self.counted: list[torch.Tensor | None] = []
        #: The first parameters of the optimizers that handed over to another.
        self.handed_over: list[torch.Tensor | None] = []
        #: The first parameter of the optimizer that stepped last.
        self.last: list[torch.Tensor | None] = [None]

    def install(self) -> None:
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        # Bound once: the hooks run at every step of the loop.
        trial, clock = self.trial, self.clock
        counted, handed_over, last = self.counted, self.handed_over, self.last
        unstepped = clock.unstepped
        orig_init: Callable[..., None] = torch.optim.Optimizer.__init__

        def init(opt: torch.optim.Optimizer, *args: object, **kwargs: object) -> None:
            orig_init(opt, *args, **kwargs)
            unstepped.add(opt)

        setattr(torch.optim.Optimizer, "__init__", init)

        def stepping(_opt: torch.optim.Optimizer, _args: Args, _kwargs: Kwargs) -> None:
            trial.training_thread = trial.training_thread or threading.current_thread()
            if threading.current_thread() is trial.training_thread:
                clock.optimizing = True

        def stepped(opt: torch.optim.Optimizer, _args: Args, _kwargs: Kwargs) -> None:
            trial.training_thread = trial.training_thread or threading.current_thread()
            if threading.current_thread() is trial.training_thread:
                clock.optimizing = False
            if unstepped:
                unstepped.discard(opt)
            param = next((p for group in opt.param_groups for p in group["params"]), None)
            previous, last[0] = last[0], param
            if not counted:
                counted.append(param)
            elif param is not counted[0]:
                if previous is not param:
                    if not clock.interleaved and any(param is p for p in handed_over):
                        clock.interleave()
                    return
                handed_over.append(counted[0])
                counted[0] = param
                clock.new_phase()
            clock.boundary("optimizer", None)

        register_optimizer_step_pre_hook(stepping)
        register_optimizer_step_post_hook(stepped)
