"""2026-11-26 privacy audit: the secret stream's generator had 2^32 possible states on the CPU
(torch's MT19937 keeps only the low 32 bits of ``manual_seed``'s 63 OS bits), so a run's noise
could be found by trying every 32-bit seed. Now its whole state comes from ``os.urandom``."""
import math
import struct

import pytest
import torch

from pyro_dp.mechanisms import NoiseSource, seed_from_os


def _mt_words(g: torch.Generator):
    raw = bytes(g.get_state().numpy().tobytes())
    return [struct.unpack_from("<I", raw, 24 + 8 * i)[0] for i in range(624)]


def _seeded_by_its_first_word(words) -> bool:
    """MT19937's seeding recursion (Matsumoto & Nishimura 1998, init_genrand): a state derived
    from a 32-bit seed is a function of its first word."""
    w = words[0]
    for i in range(1, 624):
        w = (1812433253 * (w ^ (w >> 30)) + i) & 0xFFFFFFFF
        if words[i] != w:
            return False
    return True


def test_manual_seed_keeps_32_bits_the_control():
    g = torch.Generator()
    g.manual_seed((123 << 32) | 456)
    h = torch.Generator()
    h.manual_seed(456)
    assert _seeded_by_its_first_word(_mt_words(g))  # the weakness: the state is a 32-bit function
    assert torch.equal(torch.randn(5, generator=g), torch.randn(5, generator=h))


def test_the_noise_generator_state_is_not_a_32_bit_seed():
    for secure in (False, True):
        for _ in range(3):
            words = _mt_words(NoiseSource(secure_mode=secure).generator)
            assert not _seeded_by_its_first_word(words)
            assert len(set(words)) > 600  # 624 words from os.urandom


def test_os_seeded_streams_differ_and_the_seeded_test_option_still_reproduces():
    a, b = seed_from_os(torch.Generator()), seed_from_os(torch.Generator())
    assert not torch.equal(torch.randn(8, generator=a), torch.randn(8, generator=b))
    x, y = NoiseSource(seed=7, warn=False), NoiseSource(seed=7, warn=False)
    assert torch.equal(x.standard_normal((4,)), y.standard_normal((4,)))
    # a seeded test stream survives pickling with its full state (reproducible tests)
    import pickle

    n = NoiseSource(seed=7, warn=False)
    clone = pickle.loads(pickle.dumps(n))
    assert torch.equal(n.standard_normal((4,)), clone.standard_normal((4,)))


def test_a_copy_of_the_secret_stream_is_reseeded_from_the_os():
    """Issue #38: a deep copy or a pickle round trip of an OS-seeded ``NoiseSource`` drew the
    original's next normals (two copies run on neighbouring data sets would release with the
    same noise). The copy is now reseeded from OS entropy and the pickle holds no state."""
    import copy
    import pickle

    for secure in (False, True):
        n = NoiseSource(secure_mode=secure)
        n.standard_normal((3,))
        blob = pickle.dumps(n)
        assert n.__getstate__()["state"] is None  # the secret state is not in the pickle
        copies = [copy.deepcopy(n), pickle.loads(blob)]
        mine = n.standard_normal((16,))
        draws = [c.standard_normal((16,)) for c in copies]
        assert all(not torch.equal(mine, d) for d in draws) and not torch.equal(draws[0], draws[1])
        assert all(c.secure_mode == secure and not c.seeded for c in copies)
        assert not _seeded_by_its_first_word(_mt_words(copies[1].generator))  # whole state from os.urandom


@pytest.mark.fresh_noise
def test_a_copied_kernel_draws_its_own_secret_noise():
    """Issue #38 at the kernel level: ``copy.deepcopy(kernel)`` / a pickle round trip mid-run
    (no ``noise_seed``) gives the copy its own secret stream; the data-free stream is copied."""
    import copy
    import pickle

    import pyro_dp
    from tests.kernels.helpers import gauss_model, make_data

    k = pyro_dp.DPPenalty(gauss_model, 0.1, llr_clip=1.0, noise_multiplier=3.0, seed=0)
    k.setup(0, make_data(30, seed=1))
    k.sample(k.initial_params)
    copies = [copy.deepcopy(k), pickle.loads(pickle.dumps(k))]
    mine = k._noise.standard_normal((16,))
    for c in copies:
        assert torch.equal(c._rng.get_state(), k._rng.get_state())  # data-free: continues
        assert not torch.equal(c._noise.standard_normal((16,)), mine)
        assert c.ledger == k.ledger


def test_a_copy_of_the_seeded_test_stream_continues_it():
    """The documented exception: a ``noise_seed`` (test option) stream is copied as it is, so
    pickled kernels in reproducible tests continue identically (its seed is no secret)."""
    import copy
    import pickle

    n = NoiseSource(seed=5, warn=False)
    n.standard_normal((2,))
    a, b = copy.deepcopy(n), pickle.loads(pickle.dumps(n))
    x = n.standard_normal((6,))
    assert torch.equal(a.standard_normal((6,)), x) and torch.equal(b.standard_normal((6,)), x)
    with pytest.raises(RuntimeError, match="secret stream"):
        NoiseSource().get_state()
