"""Shared assertion of the set-up checks' tests (``test_prior_reads_no_data``,
``test_one_row_one_term``): the default-path kernels refuse a model before anything is released."""
import pytest
from pyro.infer import MCMC

import pyro_dp


def assert_kernels_refuse_before_any_release(model, match, *args, **kwargs):
    """``DPPenalty`` and ``DPHMC`` on the default path raise ``ValueError`` matching ``match``
    when ``MCMC`` runs ``model`` on ``args``/``kwargs``, and their ledgers stay empty (ε = 0)."""
    for kernel in (pyro_dp.DPPenalty(model, epsilon=1.0, num_iterations=20, inference="iterative"),
                   pyro_dp.DPHMC(model, epsilon=1.0, num_iterations=20, inference="iterative")):
        with pytest.raises(ValueError, match=match):
            MCMC(kernel, num_samples=10, warmup_steps=10, disable_progbar=True).run(*args, **kwargs)
        assert kernel.get_epsilon(1e-5) == 0.0  # nothing was released
