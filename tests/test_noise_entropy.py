"""2026-11-26 privacy audit: the secret stream's generator had 2^32 possible states on the CPU
(torch's MT19937 keeps only the low 32 bits of ``manual_seed``'s 63 OS bits), so a run's noise
could be found by trying every 32-bit seed. Now its whole state comes from ``os.urandom``."""
import struct

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
    # the stream survives pickling (worker processes) with its full state
    import pickle

    n = NoiseSource()
    clone = pickle.loads(pickle.dumps(n))
    assert torch.equal(n.standard_normal((4,)), clone.standard_normal((4,)))
