"""autotune's sampler on a study of hundreds of trials: its model is fitted on a bounded set."""

from __future__ import annotations

import optuna

from autotune.search import strategy
from autotune.search.models import CategoricalGP
from autotune.search.strategy import FIT_BEST, FIT_LATEST, AutotuneSampler
from autotune.space import config_key, parse_space
from autotune.storage.attrs import trial_attrs

LEVELS = list(range(20))
SPACE = parse_space(f"""\
target: xla
parameters:
  a: {{type: int, choices: {LEVELS}, default: 0}}
  b: {{type: int, choices: {LEVELS}, default: 0}}
""")


def test_the_model_is_fitted_on_the_best_and_the_latest_of_a_long_study(monkeypatch) -> None:
    study = optuna.create_study(direction="maximize")
    measured = [{"a": a, "b": b} for a in LEVELS for b in LEVELS][:300]
    for n, config in enumerate(measured):
        study.add_trial(optuna.trial.create_trial(
            params={}, distributions={}, values=[1000.0 - n if n % 7 else 2000.0 + n],
            user_attrs=trial_attrs(config_key=config_key(config), counted=True)))
    fitted = []
    fit = CategoricalGP.fit

    def recorded(self, X, y, **kwargs):
        fitted.append(sorted(y.tolist()))
        return fit(self, X, y, **kwargs)

    monkeypatch.setattr(CategoricalGP, "fit", recorded)
    proposal = AutotuneSampler(SPACE, seed=0).propose(study)
    assert config_key(proposal) not in {config_key(c) for c in measured}
    values = [t.value for t in study.get_trials()]
    best = sorted(strategy._transform(v, True) for v in values)[-FIT_BEST:]
    latest = [strategy._transform(v, True) for v in values[-FIT_LATEST:]]
    assert fitted and fitted[-1] == sorted(set(best) | set(latest))
