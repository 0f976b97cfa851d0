r"""Covariates on their own scales (#40): logistic regression, d = 3, features with correlation 0.8
in the unit ball, then multiplied by column scales 1, 30 and 1 000 (``SCALED=1`` in the
environment: scales 1, 1, 1), N = 5·10⁴, the card's line with ``epsilon=`` only.

Modes: ``plain`` (the kernel's default path), ``scale`` (``init=DPAutoTune(scale=True)``: the
per-coordinate scales without the metric), ``private`` (``DPAutoTune(whiten=True)``),
``oracle`` (reparametrised by hand with the non-private Laplace fit: a measurement only).

Reference: the Laplace approximation (MAP by Newton, inverse Hessian); reported: the worst
|mean error| in reference sds and the range of sd ratios (``docs/tuning.md``, "Columns on their
own scales"). The release noise is from OS entropy: run several data seeds.

Run: ``python benchmarks/unscaled.py EPS KERNEL MODE SEED`` (e.g. ``8 DPPenalty plain 0``).
"""
import sys, time, math, warnings, torch, pyro, pyro.distributions as dist
from pyro.infer import MCMC
import pyro_dp
torch.set_num_threads(1)
warnings.simplefilter("ignore")
D, N = 3, 50_000
eps = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
kern = sys.argv[2] if len(sys.argv) > 2 else "DPPenalty"
mode = sys.argv[3] if len(sys.argv) > 3 else "plain"
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
g = torch.Generator().manual_seed(seed)
C = 0.8 * torch.ones(D, D, dtype=torch.float64) + 0.2 * torch.eye(D, dtype=torch.float64)
X = torch.randn(N, D, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(C).T / math.sqrt(D)
X = X / X.norm(dim=1, keepdim=True).clamp(min=1.0)
w_true = torch.tensor([1.0, -0.5, 0.8], dtype=torch.float64)
import os
SCALES = torch.tensor([1.0, 30.0, 1000.0], dtype=torch.float64) if not os.environ.get("SCALED") else torch.ones(3, dtype=torch.float64)
X = X * SCALES; w_true = w_true / SCALES
y = torch.bernoulli(torch.sigmoid(X @ w_true), generator=g)

def model(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(D, dtype=X.dtype), 10.0).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

# Laplace reference
w = torch.zeros(D, dtype=torch.float64, requires_grad=True)
def nlp(w):
    return -(dist.Bernoulli(logits=X @ w).log_prob(y).sum() + dist.Normal(0, 10.0).log_prob(w).sum())
for _ in range(30):
    l = nlp(w); gr, = torch.autograd.grad(l, w); H = torch.autograd.functional.hessian(nlp, w.detach())
    with torch.no_grad(): w -= torch.linalg.solve(H, gr)
H = torch.autograd.functional.hessian(nlp, w.detach()); Sig = torch.linalg.inv(H)
ref_mean, ref_sd = w.detach(), Sig.diag().sqrt()

if mode == "oracle":  # whitened by the (non-private) Laplace fit: the best case of a private one
    mu0, L = ref_mean.clone(), torch.linalg.cholesky(Sig)
    Linv = torch.linalg.inv(L)
    def umodel(X, y, mu0, L):
        # w = mu0 + L u; prior of u induced from w ~ N(0, 4 I)
        cov_u = 4.0 * Linv @ Linv.T
        u = pyro.sample("u", dist.MultivariateNormal(-Linv @ mu0, covariance_matrix=cov_u))
        w = mu0 + L @ u
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)
    K = getattr(pyro_dp, kern)(umodel, epsilon=eps, jit_compile=True, public=["mu0", "L"] if False else [2, 3])
    args = (X, y, mu0, L)
elif mode == "scale":
    from pyro_dp.kernels.tuning import DPAutoTune
    K = getattr(pyro_dp, kern)(model, epsilon=eps, jit_compile=True, init=DPAutoTune(scale=True))
    args = (X, y)
elif mode == "private":
    from pyro_dp.kernels.tuning import DPAutoTune
    K = getattr(pyro_dp, kern)(model, epsilon=eps, jit_compile=True, init=DPAutoTune(whiten=True))
    args = (X, y)
else:
    K = getattr(pyro_dp, kern)(model, epsilon=eps, jit_compile=True)
    args = (X, y)
t = time.time()
m = MCMC(K, num_samples=1000, warmup_steps=500, disable_progbar=True)
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    m.run(*args)
s = m.get_samples()
ws_ = [str(x.message)[:160] for x in ws if type(x.message).__module__.startswith("pyro_dp")]
if mode == "oracle":
    W = mu0 + s["u"] @ L.T
else:
    W = s["w"]
err = ((W.mean(0) - ref_mean).abs() / ref_sd)
ratio = W.std(0) / ref_sd
print(f"{kern} eps={eps} {mode} seed={seed}: worst mean err {err.max():.2f} sd ratio {ratio.min():.2f}-{ratio.max():.2f} "
      f"eps_spent {K.get_epsilon(1e-5):.2f} time {time.time()-t:.0f}s warnings {len(ws_)}")
for x in ws_[:3]: print("   ", x)
