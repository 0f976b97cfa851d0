"""pyro_dp.arguments: what counts as data, decided from types and shapes alone (#38)."""
import numpy as np
import pandas as pd
import pytest
import torch

from pyro_dp.arguments import ModelArguments, as_tensor_argument


def test_array_data_become_tensors():
    a = np.arange(3.0)
    t = as_tensor_argument(a)
    assert torch.is_tensor(t) and t.data_ptr() == a.ctypes.data  # no copy of a large data set
    ro = np.arange(3.0)
    ro.flags.writeable = False
    assert torch.equal(as_tensor_argument(ro), torch.arange(3.0, dtype=torch.float64))
    assert torch.equal(as_tensor_argument(pd.Series([1, 2, 3])), torch.tensor([1, 2, 3]))
    assert as_tensor_argument(pd.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]})).shape == (2, 2)
    assert as_tensor_argument("label") == "label" and as_tensor_argument(None) is None
    with pytest.raises(TypeError, match="numeric tensors"):
        as_tensor_argument(np.array(["a", "b"]))


def test_classification():
    a = ModelArguments((torch.zeros(5, 2), torch.ones(5), torch.ones(2), 5), {"k": 3, "w": torch.ones(5)},
                       public=["w"])
    a.classify(5)
    assert a.describe() == {"data": ["argument 0", "argument 1"], "row count": ["argument 3"],
                            "public": ["argument 2", "argument 'k'", "argument 'w'"]}
    args, kwargs = a.build([torch.zeros(1, 2), torch.ones(1)], count=1)
    assert args[0].shape == (1, 2) and args[3] == 1 and kwargs["k"] == 3 and kwargs["w"].shape == (5,)
    rows = a.rows(torch.tensor([4, 0]))
    assert [r.shape for r in rows] == [(2, 1, 2), (2, 1)]


def test_refusals():
    with pytest.raises(ValueError, match="public=3 names no argument"):
        ModelArguments((torch.zeros(2),), public=[3])
    a = ModelArguments((torch.zeros(2, 5),))
    with pytest.raises(ValueError, match="later dimension"):
        a.classify(5)
    a = ModelArguments(([1.0] * 5,))
    with pytest.raises(ValueError, match="list of N = 5 entries"):
        a.classify(5)
    a = ModelArguments(([1.0] * 5,), public=[0])
    a.classify(5)
    assert a.describe()["public"] == ["argument 0"]


def test_stand_ins_hold_no_data_value():
    x = torch.full((30, 2), 7.5, dtype=torch.float64)
    a = ModelArguments((x, torch.arange(30), torch.ones(30, dtype=torch.bool)))
    a.classify(30)
    zeros = a.stand_in(4)
    assert all(not bool(z.any()) for z in zeros)
    rnd = a.stand_in(16, "random", torch.Generator().manual_seed(0))
    assert 7.5 not in set(rnd[0].flatten().tolist()) and float(rnd[0][0, 0]) == 50.0
    assert set(rnd[1].tolist()) <= {0, 1} and rnd[2].dtype == torch.bool
